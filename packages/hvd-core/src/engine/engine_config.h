// engine_config.h - every HOROVOD_* / HVD_* variable the engine reads at
// start-up, parsed here and nowhere else, each default written once (as a
// field's initialiser below). A value that cannot be used throws
// Error(kInvalidArgument) naming the variable.
//
// The readers are separate because start-up consults them at different
// moments, and a variable is only read (so only fails) where it is needed:
// the rendezvous variables only when there are peers, the thread affinity
// once the local topology is known, the timeline only on rank 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "net/socket.h"

namespace hvd {

// HOROVOD_FUSION_THRESHOLD's default, 128 MiB: the one spelling of it.
constexpr int64_t kDefaultFusionThresholdBytes = 128ll << 20;

// HOROVOD_AUTOTUNE*: see engine/autotune.h.
struct AutotuneConfig {
  bool enabled = false;          // HOROVOD_AUTOTUNE
  std::string log_path;          // HOROVOD_AUTOTUNE_LOG: CSV of every sample ("" = none)
  int warmup_samples = 3;        // HOROVOD_AUTOTUNE_WARMUP_SAMPLES: scores ignored at the start
  int steps_per_sample = 10;     // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
  int max_samples = 20;          // HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES: settings the search tries
  double noise = 0.8;            // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE (on standardised scores)
  // Knobs the user set explicitly stay as set: HOROVOD_FUSION_THRESHOLD or
  // HOROVOD_CYCLE_TIME fix the pair, HOROVOD_CACHE_CAPACITY the cache,
  // HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER the staging across hosts.
  bool tune_fusion_and_cycle = true;
  bool tune_cache = true;
  bool tune_hierarchical_allreduce = true;
  bool tune_hierarchical_allgather = true;
};

// The knobs every process set of the engine runs with.
struct EngineConfig {
  int64_t fusion_threshold_bytes = kDefaultFusionThresholdBytes;  // HOROVOD_FUSION_THRESHOLD
  double cycle_time_seconds = 0.001;    // HOROVOD_CYCLE_TIME (given in milliseconds)
  // How long a held burst of single-tensor allreduces waits for its next
  // one (docs/fusion.md); HVD_HOLD_GAP_US, internal (tests, measurements).
  double hold_gap_seconds = 100e-6;
  size_t cache_capacity = 1024;         // HOROVOD_CACHE_CAPACITY; negative: 0
  bool stall_check_enabled = true;      // HOROVOD_STALL_CHECK_DISABLE turns it off
  double stall_check_seconds = 60;      // HOROVOD_STALL_CHECK_TIME_SECONDS
  double stall_shutdown_seconds = 0;    // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; 0: never
  double peer_timeout_seconds = 5;      // HOROVOD_PEER_TIMEOUT_SECONDS; must be positive
  double connect_timeout_seconds = 30;  // HOROVOD_GLOO_TIMEOUT_SECONDS
  bool allow_shm = true;                // HOROVOD_SHM_DISABLE turns it off
  // Control channels between members on one host over shared-memory rings;
  // off with HOROVOD_SHM_DISABLE, or alone with HVD_CONTROL_RING=0 (an
  // internal switch for A/B measurements). Member 0 decides for its set.
  bool control_over_shm = true;
  // Small synchronous allreduces that were negotiated before run through the
  // shared-memory arena's fast lane (docs/core.md, "The fast lane") when a
  // set's members share a host; HVD_SHM_LANE=0 turns it off (an internal
  // switch for A/B measurements and tests).
  bool shm_lane = true;
  // Host allreduces of at most this many bytes carry their input with the
  // request (see RequestMeta::inline_data). Unset: kMaxInlineBytes in process
  // sets that span hosts, where it saves network hops, and 0 within one host,
  // where the shared-memory collective costs little and keeps the ranks in
  // step (an allreduce returns on every rank at about the same time, which
  // programs use as a barrier). HVD_INLINE_ALLREDUCE_BYTES (up to
  // kMaxInlineBytes) forces a limit everywhere: an internal switch for tests
  // and A/B runs.
  std::optional<size_t> inline_allreduce_bytes;
  bool hierarchical = true;             // HOROVOD_HIERARCHICAL_ALLREDUCE
  bool hierarchical_allgather = true;   // HOROVOD_HIERARCHICAL_ALLGATHER
  bool use_mpi = false;                 // HOROVOD_CPU_OPERATIONS=mpi (gloo: hvd's own transports)
  // HOROVOD_SPIN_WAIT: 1 or 0 forces busy-polling waits on or off; unset or
  // "auto": the engine decides (see Engine::start).
  std::optional<bool> spin_wait;
  bool spin = true;  // the decision: waits busy-poll (else yield the CPU between steps)
  int background_core = -1;  // HOROVOD_THREAD_AFFINITY: pin background threads here; -1: no pinning
  // HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_<OP>: NCCL for CUDA tensors, by
  // Collective value (false: staged through the CPU transports).
  std::array<bool, 8> gpu_use_nccl{{true, true, true, true, true, true, true, true}};
  // HOROVOD_HIERARCHICAL_ALLREDUCE=1 given explicitly: CUDA allreduces across
  // hosts go NCCL-within-host, CPU transports across (flat NCCL otherwise).
  bool gpu_hierarchical = false;
  bool dynamic_process_sets = false;  // HOROVOD_DYNAMIC_PROCESS_SETS
  // Every TCP link's bytes after the handshake (net/socket.h):
  // HOROVOD_DATA_AUTH=1 MACs each frame, HOROVOD_DATA_ENCRYPT=1 also
  // encrypts it (and implies the MAC). Shared memory is not covered.
  DataProtection data_protection = DataProtection::kNone;
  AutotuneConfig autotune;

  // Everything above but `spin` and `background_core`, which depend on the
  // topology (see Engine::start and background_core_from_environment).
  static EngineConfig from_environment();

  // The settings whose values must be the same on every rank (they choose
  // transports and algorithms the ranks run together), as "VARIABLE=value"
  // entries joined by ';'. Ranks publish it at start-up and compare.
  std::string settings_that_must_agree() const;
};

// The first setting in which two settings_that_must_agree() strings differ:
// {"HOROVOD_SHM_DISABLE", "0", "1"}; empty strings when they agree.
struct SettingDifference {
  std::string variable, first_value, second_value;
};
SettingDifference first_setting_difference(const std::string& first, const std::string& second);

// Where the launcher placed this rank. Local and cross positions it did not
// give are derived by the engine from the host names the ranks publish.
struct LaunchPlacement {
  int rank = 0;  // HOROVOD_RANK, else OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK
  int size = 1;  // HOROVOD_SIZE, else OMPI_COMM_WORLD_SIZE, PMI_SIZE
  std::string hostname;  // HOROVOD_HOSTNAME, else this machine's name
  std::optional<int> local_rank;  // HOROVOD_LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID
  std::optional<int> local_size;  // HOROVOD_LOCAL_SIZE, else OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS
  std::optional<int> cross_rank;  // HOROVOD_CROSS_RANK
  std::optional<int> cross_size;  // HOROVOD_CROSS_SIZE

  // Nothing set: rank 0 of 1. A rank outside [0, size) is an error.
  static LaunchPlacement from_environment();
};

// How this rank meets its peers.
struct RendezvousConfig {
  std::string round;  // HVD_RENDEZVOUS_ROUND: the elastic driver's round; empty outside elastic jobs
  // Read only when the job has more than one rank, and then required:
  std::string addr;    // HOROVOD_GLOO_RENDEZVOUS_ADDR
  int port = 0;        // HOROVOD_GLOO_RENDEZVOUS_PORT
  std::string secret;  // HOROVOD_SECRET_KEY
  std::string iface;   // HOROVOD_GLOO_IFACE: the interface to listen on; empty: the one reaching the store

  static RendezvousConfig from_environment(const LaunchPlacement& placement);
};

// HOROVOD_THREAD_AFFINITY: a comma-separated core per local rank; the
// background threads of this rank's process sets run on its core. -1: unset.
int background_core_from_environment(int local_rank, int local_size);

// HOROVOD_TIMELINE: the file rank 0 writes from start-up; empty for none,
// and for DYNAMIC (Horovod's spelling for "not until hvd.start_timeline()").
struct TimelineConfig {
  std::string path;
  bool mark_cycles = false;  // HOROVOD_TIMELINE_MARK_CYCLES, read only with a path

  static TimelineConfig from_environment();
};

}  // namespace hvd
