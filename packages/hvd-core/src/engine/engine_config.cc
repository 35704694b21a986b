// engine_config.cc - see engine_config.h.
#include "engine/engine_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <initializer_list>
#include <sstream>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "engine/message.h"

namespace hvd {
namespace {

// The first variable of `names` that is set, parsed as an integer.
std::optional<int> env_first_int(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (env_is_set(n)) return static_cast<int>(env_int(n, 0));
  }
  return std::nullopt;
}

std::string local_hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string lower(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return value;
}

// HOROVOD_GPU_OPERATIONS sets how every collective moves CUDA tensors,
// HOROVOD_GPU_ALLREDUCE (..._ALLGATHER, ...) one collective's: NCCL (the
// default), or MPI / GLOO - through host memory and the CPU transports. In
// Horovod these chose what was compiled in; here they choose at start-up.
void read_gpu_operations(EngineConfig* config) {
  auto parse = [](const char* name, bool fallback) {
    std::string value = env_string(name, "");
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (value.empty()) return fallback;
    if (value == "NCCL") return true;
    if (value == "MPI" || value == "GLOO") return false;
    throw_error(ErrorCode::kInvalidArgument, std::string(name) + "=" + env_string(name, "") +
                                                 " is not supported; use NCCL, or MPI / GLOO to move CUDA tensors "
                                                 "through host memory");
  };
  const bool all = parse("HOROVOD_GPU_OPERATIONS", true);
  const std::pair<const char*, Collective> per_op[] = {
      {"HOROVOD_GPU_ALLREDUCE", Collective::kAllreduce},   {"HOROVOD_GPU_ALLGATHER", Collective::kAllgather},
      {"HOROVOD_GPU_BROADCAST", Collective::kBroadcast},   {"HOROVOD_GPU_ALLTOALL", Collective::kAlltoall},
      {"HOROVOD_GPU_REDUCESCATTER", Collective::kReducescatter}};
  config->gpu_use_nccl.fill(all);
  for (const auto& [name, collective] : per_op) config->gpu_use_nccl[static_cast<size_t>(collective)] = parse(name, all);
}

}  // namespace

std::string EngineConfig::settings_that_must_agree() const {
  std::string gpu;
  for (bool nccl : gpu_use_nccl) gpu += nccl ? 'N' : 'C';  // per collective: NCCL or CPU transports
  return std::string("HOROVOD_SHM_DISABLE=") + (allow_shm ? "0" : "1") +
         ";HOROVOD_HIERARCHICAL_ALLREDUCE=" + (hierarchical ? "1" : "0") +
         ";HOROVOD_HIERARCHICAL_ALLGATHER=" + (hierarchical_allgather ? "1" : "0") +
         ";HOROVOD_CPU_OPERATIONS=" + (use_mpi ? "mpi" : "gloo") +
         ";HOROVOD_DYNAMIC_PROCESS_SETS=" + (dynamic_process_sets ? "1" : "0") +
         // Autotune turns the fast lane off, and bindings share the tuned
         // gradient bucket through a collective only when it is on.
         ";HOROVOD_AUTOTUNE=" + (autotune.enabled ? "1" : "0") +
         // Encryption first: it implies the MAC, and a rank that encrypts
         // where another only MACs should hear about the knob it set.
         ";HOROVOD_DATA_ENCRYPT=" + (data_protection == DataProtection::kEncrypt ? "1" : "0") +
         ";HOROVOD_DATA_AUTH=" + (data_protection != DataProtection::kNone ? "1" : "0") +
         ";HOROVOD_GPU_OPERATIONS and HOROVOD_GPU_<OP>=" + gpu;
}

SettingDifference first_setting_difference(const std::string& first, const std::string& second) {
  auto split = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> entries;
    std::istringstream in(text);
    std::string entry;
    while (std::getline(in, entry, ';')) {
      size_t eq = entry.find('=');
      entries.emplace_back(entry.substr(0, eq), eq == std::string::npos ? "" : entry.substr(eq + 1));
    }
    return entries;
  };
  auto a = split(first), b = split(second);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size() || a[i] != b[i]) {
      const auto& named = i < a.size() ? a[i] : b[i];
      return {named.first, i < a.size() ? a[i].second : "(unset)", i < b.size() ? b[i].second : "(unset)"};
    }
  }
  return {};
}

EngineConfig EngineConfig::from_environment() {
  EngineConfig c;  // the defaults
  c.fusion_threshold_bytes = env_int("HOROVOD_FUSION_THRESHOLD", c.fusion_threshold_bytes);
  c.cycle_time_seconds = env_double("HOROVOD_CYCLE_TIME", c.cycle_time_seconds * 1000.0) / 1000.0;
  c.hold_gap_seconds = std::max(0.0, env_double("HVD_HOLD_GAP_US", c.hold_gap_seconds * 1e6) / 1e6);
  c.cache_capacity = static_cast<size_t>(
      std::max<int64_t>(0, env_int("HOROVOD_CACHE_CAPACITY", static_cast<int64_t>(c.cache_capacity))));
  c.stall_check_enabled = !env_bool("HOROVOD_STALL_CHECK_DISABLE", !c.stall_check_enabled);
  c.stall_check_seconds = env_double("HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall_check_seconds);
  c.stall_shutdown_seconds = env_double("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds);
  c.peer_timeout_seconds = env_double("HOROVOD_PEER_TIMEOUT_SECONDS", c.peer_timeout_seconds);
  c.connect_timeout_seconds = env_double("HOROVOD_GLOO_TIMEOUT_SECONDS", c.connect_timeout_seconds);
  c.allow_shm = !env_bool("HOROVOD_SHM_DISABLE", !c.allow_shm);
  if (env_bool("HOROVOD_DATA_ENCRYPT", false)) {
    c.data_protection = DataProtection::kEncrypt;
  } else if (env_bool("HOROVOD_DATA_AUTH", false)) {
    c.data_protection = DataProtection::kAuthenticate;
  }
  c.control_over_shm = c.allow_shm && env_bool("HVD_CONTROL_RING", c.control_over_shm);
  c.shm_lane = c.allow_shm && env_bool("HVD_SHM_LANE", c.shm_lane);
  if (env_is_set("HVD_INLINE_ALLREDUCE_BYTES")) {
    c.inline_allreduce_bytes = static_cast<size_t>(
        std::clamp<int64_t>(env_int("HVD_INLINE_ALLREDUCE_BYTES", 0), 0, static_cast<int64_t>(kMaxInlineBytes)));
  }
  c.hierarchical = env_bool("HOROVOD_HIERARCHICAL_ALLREDUCE", c.hierarchical);
  c.hierarchical_allgather = env_bool("HOROVOD_HIERARCHICAL_ALLGATHER", c.hierarchical_allgather);
  // For CUDA tensors only when asked for (Horovod's default is off): NCCL's
  // own algorithms across hosts usually beat a detour through host memory.
  c.gpu_hierarchical = env_is_set("HOROVOD_HIERARCHICAL_ALLREDUCE") && c.hierarchical;
  // Horovod's data-plane selector: gloo (hvd's own shared memory / TCP, the
  // default) or mpi; ccl has no counterpart here.
  const std::string cpu_operations = lower(env_string("HOROVOD_CPU_OPERATIONS", ""));
  if (cpu_operations == "mpi") {
    c.use_mpi = true;
  } else if (!cpu_operations.empty() && cpu_operations != "gloo") {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_CPU_OPERATIONS=" + env_string("HOROVOD_CPU_OPERATIONS", "") +
                                                 " is not supported; use gloo (hvd's shared memory and TCP, the "
                                                 "default) or mpi");
  }
  read_gpu_operations(&c);
  c.dynamic_process_sets = env_bool("HOROVOD_DYNAMIC_PROCESS_SETS", c.dynamic_process_sets);
  const std::string spin_wait = lower(env_string("HOROVOD_SPIN_WAIT", "auto"));
  if (spin_wait == "1" || spin_wait == "on") {
    c.spin_wait = true;
  } else if (spin_wait == "0" || spin_wait == "off") {
    c.spin_wait = false;
  } else if (spin_wait != "auto") {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_SPIN_WAIT=" + env_string("HOROVOD_SPIN_WAIT", "") +
                                                 " is not supported; use auto (the default), 1 or 0");
  }
  AutotuneConfig& at = c.autotune;
  at.enabled = env_bool("HOROVOD_AUTOTUNE", at.enabled);
  at.log_path = env_string("HOROVOD_AUTOTUNE_LOG", at.log_path);
  at.warmup_samples = static_cast<int>(env_int("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", at.warmup_samples));
  at.steps_per_sample = static_cast<int>(env_int("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", at.steps_per_sample));
  at.max_samples = static_cast<int>(env_int("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", at.max_samples));
  at.noise = env_double("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", at.noise);
  at.tune_fusion_and_cycle = !env_is_set("HOROVOD_FUSION_THRESHOLD") && !env_is_set("HOROVOD_CYCLE_TIME");
  at.tune_cache = !env_is_set("HOROVOD_CACHE_CAPACITY");
  at.tune_hierarchical_allreduce = !env_is_set("HOROVOD_HIERARCHICAL_ALLREDUCE");
  at.tune_hierarchical_allgather = !env_is_set("HOROVOD_HIERARCHICAL_ALLGATHER");
  for (const auto& [name, value] : {std::pair<const char*, int>{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", at.steps_per_sample},
                                    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", at.max_samples}}) {
    if (value < 1) throw_error(ErrorCode::kInvalidArgument, std::string(name) + " must be at least 1");
  }
  if (at.warmup_samples < 0) {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES must not be negative");
  }
  if (!(at.noise > 0)) throw_error(ErrorCode::kInvalidArgument, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE must be positive");
  if (c.peer_timeout_seconds <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_PEER_TIMEOUT_SECONDS must be positive");
  }
  if (c.connect_timeout_seconds <= 0) {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_GLOO_TIMEOUT_SECONDS must be positive");
  }
  for (const auto& [name, value] : {std::pair<const char*, double>{"HOROVOD_CYCLE_TIME", c.cycle_time_seconds},
                                    {"HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall_check_seconds},
                                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds}}) {
    if (value < 0) throw_error(ErrorCode::kInvalidArgument, std::string(name) + " must not be negative");
  }
  return c;
}

LaunchPlacement LaunchPlacement::from_environment() {
  LaunchPlacement p;
  p.rank = env_first_int({"HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}).value_or(p.rank);
  p.size = env_first_int({"HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}).value_or(p.size);
  if (p.size < 1 || p.rank < 0 || p.rank >= p.size) {
    throw_error(ErrorCode::kInvalidArgument, "invalid rank " + std::to_string(p.rank) + " for size " +
                                                 std::to_string(p.size) + " (HOROVOD_RANK / HOROVOD_SIZE)");
  }
  p.hostname = env_string("HOROVOD_HOSTNAME", local_hostname());
  p.local_rank = env_first_int({"HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
  p.local_size = env_first_int({"HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  p.cross_rank = env_first_int({"HOROVOD_CROSS_RANK"});
  p.cross_size = env_first_int({"HOROVOD_CROSS_SIZE"});
  return p;
}

RendezvousConfig RendezvousConfig::from_environment(const LaunchPlacement& placement) {
  RendezvousConfig c;
  c.round = env_string("HVD_RENDEZVOUS_ROUND", "");
  if (placement.size == 1) return c;  // alone: no store, no peers
  c.addr = env_string("HOROVOD_GLOO_RENDEZVOUS_ADDR", "");
  c.port = static_cast<int>(env_int("HOROVOD_GLOO_RENDEZVOUS_PORT", 0));
  c.secret = env_string("HOROVOD_SECRET_KEY", "");
  if (c.addr.empty() || c.port <= 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "rank " + std::to_string(placement.rank) + " of " + std::to_string(placement.size) +
                    ": HOROVOD_GLOO_RENDEZVOUS_ADDR and HOROVOD_GLOO_RENDEZVOUS_PORT are not set. "
                    "Start multi-process jobs with horovodrun (or set them to the job's rendezvous store).");
  }
  if (c.secret.empty()) {
    throw_error(ErrorCode::kInvalidArgument,
                "HOROVOD_SECRET_KEY is not set: every connection of a job must be authenticated "
                "with the job's secret. Start the job with horovodrun, which generates one.");
  }
  c.iface = env_string("HOROVOD_GLOO_IFACE", "");
  return c;
}

int background_core_from_environment(int local_rank, int local_size) {
  const std::string spec = env_string("HOROVOD_THREAD_AFFINITY", "");
  if (spec.empty()) return -1;
  std::vector<int> cores;
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int core = -1;
    try {
      core = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || core < 0) {
      throw_error(ErrorCode::kInvalidArgument, "HOROVOD_THREAD_AFFINITY=" + spec + ": '" + item +
                                                   "' is not a core number (expected one core per local rank, "
                                                   "e.g. 0,4,8,12)");
    }
    cores.push_back(core);
  }
  if (static_cast<int>(cores.size()) < local_size) {
    throw_error(ErrorCode::kInvalidArgument, "HOROVOD_THREAD_AFFINITY=" + spec + " names " +
                                                 std::to_string(cores.size()) + " core(s), but this host runs " +
                                                 std::to_string(local_size) + " ranks: give one per local rank");
  }
  return cores[static_cast<size_t>(local_rank)];
}

TimelineConfig TimelineConfig::from_environment() {
  TimelineConfig c;
  const std::string path = env_string("HOROVOD_TIMELINE", "");
  if (path.empty() || path == "DYNAMIC") return c;
  c.path = path;
  c.mark_cycles = env_bool("HOROVOD_TIMELINE_MARK_CYCLES", c.mark_cycles);
  return c;
}

}  // namespace hvd
