// process_set.h - the runtime of one process set on this rank: its queue of
// submitted operations, its background thread, its control channels (member
// 0 coordinates, the others report to it) and its communicator. Process sets
// are independent, so collectives on disjoint sets run concurrently.
#pragma once

#include <array>
#include <atomic>
#include <poll.h>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/interrupt.h"
#include "engine/control_channel.h"
#include "engine/coordinator.h"
#include "engine/engine_config.h"
#include "engine/executor.h"
#include "engine/handle.h"

namespace hvd {

class Autotuner;
class Communicator;
class ConnectionManager;
class Executor;
class GpuDataPlane;
class ShmCommunicator;
class HierarchicalCommunicator;
struct TunedSettings;
class Store;
class Timeline;

// What a process set needs from the engine.
struct ProcessSetContext {
  EngineConfig config;
  int global_rank = 0;
  std::vector<std::string> hosts;  // global rank -> host
  Store* store = nullptr;
  ConnectionManager* connections = nullptr;
  Timeline* timeline = nullptr;  // non-null on global rank 0 only
  std::string key_prefix;        // unique per job and init generation
  // Called (from any thread) when this set fails for a reason that dooms
  // the whole job (peer death): the engine aborts every other set too.
  std::function<void(const Error&)> on_fatal;
};

class ProcessSetRuntime : public Driver, public std::enable_shared_from_this<ProcessSetRuntime> {
 public:
  ProcessSetRuntime(const ProcessSetContext& context, int32_t id, std::vector<int> ranks);
  ~ProcessSetRuntime();

  int32_t id() const { return id_; }
  const std::vector<int>& ranks() const { return ranks_; }
  int member() const { return member_; }  // -1: this rank is not in the set
  int size() const { return static_cast<int>(ranks_.size()); }
  uint64_t fast_lane_calls() const { return fast_lane_calls_.load(std::memory_order_relaxed); }
  uint64_t request_batches() const { return request_batches_.load(std::memory_order_relaxed); }
  // HOROVOD_AUTOTUNE and an optimizer's gradient buckets (any thread):
  // declares them to the tuner (`configured_bytes` a bucket, `total_bytes`
  // of gradients a step). Returns 0 when the job does not autotune;
  // otherwise sets *bytes to the bucket size to use now and returns 1 while
  // the tuner may still change it, 2 once it is done. Only the coordinator
  // of the global set tunes: elsewhere the answer is (1, configured_bytes),
  // and the binding takes the coordinator's, shared through a collective.
  int autotune_gradient_bucket(int64_t configured_bytes, int64_t total_bytes, int64_t* bytes);

  // Members only, collective over the members: connects the communicator and
  // control channels, then starts the background thread. Its waits for the
  // other members call `interrupt` (when set) now and then, and end with
  // what it throws.
  void start(const Interrupt& interrupt = {});
  // Validated by the caller; takes over the engine's reference of `handle`.
  // Generates Horovod-style names ("allreduce.noname.<n>") for unnamed tensors
  // and rejects names already in flight (Error kDuplicateName).
  void enqueue(hvd_handle* handle);
  // Clean shutdown: tells the peers, stops the thread, fails what is pending.
  void stop();
  // Failure elsewhere: everything pending and later fails with `error`.
  void abort(const Error& error);
  // Why this set can run nothing any more (it failed, or was stopped);
  // null while it works.
  std::shared_ptr<const Error> failure() const;

  // Driver: a waiting caller runs the engine on its own thread.
  bool drive_once() override;
  void wake() override;
  bool callers_may_drive() const override { return true; }
  bool callers_should_yield() const override { return !context_.config.spin; }
  void begin_driving() override { active_drivers_.fetch_add(1); }
  void end_driving() override { active_drivers_.fetch_sub(1); }

 private:
  // "rank 3 (host fh2)", or with a role "rank 0 (host fh1, coordinator of process set 1)".
  std::string rank_name(int global_rank, const std::string& role = "") const;
  void loop();
  void connect_rings(const Interrupt& interrupt);  // start(): same-host control channels move to shared memory
  // One non-blocking step: handle stop/abort, take the queue, read the
  // control channels, negotiate, execute. Caller holds drive_mu_.
  void step();
  void guarded_step();  // step() with failures turned into fail()
  void step_coordinator();
  void step_worker();
  // Lets the collectives already queued on the GPU finish (up to `limit`).
  void drain_gpu(std::chrono::steady_clock::duration limit);
  // The coordinator's clean stop over NCCL: waits (up to `limit`) until every
  // member has left, so none still receives bytes this rank's NCCL sends.
  void await_members_leaving(std::chrono::steady_clock::duration limit);
  void drain_queue(std::vector<RequestMeta>* metas);
  bool queue_still_held() const;  // a hold is on and has not run out
  void execute(const std::vector<Response>& responses);
  // The plane of CUDA tensors, made (collectively) by the first response
  // that has some.
  GpuDataPlane& gpu_plane(const std::vector<LocalTensor>& locals);
  void wait_for_events(std::vector<pollfd> fds, Clock::time_point deadline);
  void check_heartbeats(Clock::time_point now);
  // Every kBlockedCheck: finds the in-flight tensors a caller of this rank
  // has been blocked on for a while; when they changed, sets blocked_ and
  // clears blocked_reported_ (the coordinator must hear of them).
  void refresh_blocked(Clock::time_point now);
  void fail(const Error& first_error);
  // Reads the control channels for up to `seconds` for a peer's kAbort; its
  // cause, or nothing when none came (or every channel closed first).
  std::optional<Error> peer_abort_within(double seconds);
  void fail_everything(const Error& error);
  void release_name(const std::string& name);
  // The fast lane (docs/core.md): runs a synchronous single-tensor allreduce,
  // broadcast, allgather or reducescatter there when this tensor was negotiated before with a lane
  // key; false when it must be negotiated (nothing was done). Called without
  // locks.
  bool run_in_lane(hvd_handle* handle);
  // Bookkeeping after a completed lane call of tensor `name` under `key`
  // whose result is at `result`.
  bool lane_call_done(TensorSlot& t, const std::string& name, uint64_t key, void* result);
  // An engine-allocated result, freed unless a completed lane call hands it on (release()).
  struct FreeOwned {
    void operator()(DLManagedTensor* t) const;
  };
  using OwnedLaneResult = std::unique_ptr<DLManagedTensor, FreeOwned>;
  static OwnedLaneResult owned_lane_result(const std::vector<int64_t>& shape, DataType dtype);
  // Every member records the lane keys of the responses it executes (under
  // drive_mu_), so they all agree which tensor a key and occurrence mean.
  void record_lane_key(const Response& r);
  // Applies autotune's settings: the coordinator's knobs, and the staging
  // stamped on every response from now on.
  void retune(const TunedSettings& s);
  // A member's burst hold takes the cycle time stamped on a response.
  void follow_cycle_time(uint32_t us);

  ProcessSetContext context_;
  int32_t id_;
  std::vector<int> ranks_;
  // From HOROVOD_PEER_TIMEOUT_SECONDS: a channel silent for interval gets a
  // heartbeat; a peer silent for peer_timeout_ is lost.
  Clock::duration heartbeat_interval_;
  Clock::duration peer_timeout_;
  int member_ = -1;
  std::string key_;

  // Shared with callers of enqueue().
  mutable std::mutex queue_mu_;
  std::vector<hvd_handle*> queue_;
  std::unordered_set<std::string> names_in_flight_;
  std::unordered_map<int, uint64_t> noname_counters_;
  bool closed_ = false;             // stopped or failed: enqueue fails at once
  std::shared_ptr<const Error> closed_error_;  // why enqueue fails (closed_)
  std::shared_ptr<const Error> departure_;     // coordinator: members left, so the set is unusable (see failure())
  std::atomic<bool> queue_nonempty_{false};
  // A burst of single-tensor allreduces that no caller waits for (a loop of
  // allreduce_async_, torch's hook per gradient) is held back from the
  // background thread while more keep coming, so that it goes as one
  // request: until hold_gap_ after the latest (a Python loop submits one
  // every 5-30 us on the 2-CPU VM), at most hold_window_
  // (HOROVOD_CYCLE_TIME, or the coordinator's under autotune) after the
  // first. A caller that waits takes the queue at once; anything else
  // submitted ends the hold.
  std::atomic<bool> queue_held_{false};
  std::atomic<uint64_t> request_batches_{0};  // queues taken into negotiation (hvd_process_set_info)
  std::atomic<Clock::rep> hold_until_{0};  // when the hold ends, in Clock ticks
  Clock::time_point hold_started_;         // guarded by queue_mu_
  Clock::duration hold_window_{};  // guarded by queue_mu_: autotune's cycle time moves it
  Clock::duration hold_gap_{};     // set at start
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> abort_requested_{false};
  std::atomic<int> active_drivers_{0};  // callers inside handle_wait's drive loop
  std::shared_ptr<const Error> abort_error_;  // guarded by queue_mu_
  int wake_fd_ = -1;

  // Whoever holds drive_mu_ (the background thread, or a caller waiting in
  // handle_wait) owns everything below.
  std::mutex drive_mu_;
  std::unique_ptr<Communicator> comm_;
  ShmCommunicator* lane_comm_ = nullptr;  // comm_, when it has the fast lane (set at start)
  HierarchicalCommunicator* staged_comm_ = nullptr;  // comm_, when it stages across hosts (set at start)
  // Member 0: whether its responses run allreduce and allgather in stages.
  std::pair<bool, bool> staging_{true, true};
  uint32_t pipeline_chunk_bytes_ = 0;  // what the coordinator stamps on its responses (autotune; 0: default)
  uint32_t cycle_time_us_ = 0;         // the same for the cycle time (0: autotune is off)
  uint32_t followed_cycle_time_us_ = 0;  // the stamped cycle time this member holds bursts for (under drive_mu_)
  std::unique_ptr<HostDataPlane> host_plane_;
  std::unique_ptr<GpuDataPlane> gpu_plane_;  // after comm_: destroyed before it
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Autotuner> autotuner_;  // HOROVOD_AUTOTUNE: the global set's coordinator only
  // Between the tuner and autotune_gradient_bucket()'s callers.
  struct GradientBucketTuning {
    int64_t configured_bytes = -1, total_bytes = 0;  // declared by the binding (-1: not yet)
    int64_t tuned_bytes = -1;                        // the tuner's choice (-1: as configured)
    bool over = false;                               // the tuner is done
  };
  std::mutex bucket_mu_;
  GradientBucketTuning bucket_;
  void exchange_gradient_bucket();  // with the tuner, after it observed responses
  std::vector<ControlChannel> channels_;  // coordinator: by member; worker: [0] = coordinator
  size_t inline_limit_ = 0;  // largest allreduce whose input rides with its request (see EngineConfig)
  using InFlight = std::unordered_map<std::string, LocalTensor>;
  InFlight in_flight_;
  std::vector<LocalTensor> execute_locals_;        // execute()'s scratch
  std::vector<InFlight::iterator> execute_found_;  // execute()'s scratch
  hvd_handle* join_handle_ = nullptr;
  // Tensors that may use the fast lane: the key of their last response and
  // how often that key ran (lane calls and negotiated ones).
  struct LaneEntry {
    uint64_t key = 0;
    uint64_t occurrence = 0;
    // What was negotiated; a lane call must ask for exactly this.
    Collective collective = Collective::kAllreduce;
    int32_t root_rank = 0;  // broadcast
    DataType dtype = DataType::kFloat32;
    int32_t reduce_op = HVD_OP_SUM;
    double prescale = 1.0;
    double postscale = 1.0;
    std::vector<int64_t> shape;
  };
  std::mutex lane_mu_;
  std::atomic<uint64_t> fast_lane_calls_{0};
  std::unordered_map<std::string, LaneEntry> lane_entries_;
  std::vector<std::string> blocked_;  // sorted names, as refresh_blocked() found them last
  bool blocked_reported_ = true;      // the coordinator knows blocked_ (empty at first)
  Clock::time_point next_blocked_check_;
  Clock::time_point next_stall_check_;
  Clock::time_point wake_at_;
  bool background_step_ = false;  // the background thread runs this step: it leaves a held queue alone
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace hvd
