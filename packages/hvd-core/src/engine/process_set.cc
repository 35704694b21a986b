// process_set.cc - the background loop of one process set.
//
// Coordinator (member 0):  local queue + workers' requests -> Coordinator
//                          -> responses sent to every worker -> executed here.
// Worker:                  local queue -> requests to the coordinator;
//                          responses from the coordinator -> executed here.
// Both send heartbeats when idle and treat silence longer than
// HOROVOD_PEER_TIMEOUT_SECONDS as a dead peer.
#include "engine/process_set.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "auth/hmac_sha256.h"
#include "common/deadline.h"
#include "common/logging.h"
#include "engine/autotune.h"
#include "engine/executor.h"
#include "engine/timeline.h"
#include "gpu/gpu_data_plane.h"
#include "gpu/gpu_plugin_loader.h"
#include "net/connection_manager.h"
#include "net/socket.h"
#include "reduce/reduce.h"
#include "rendezvous/store.h"
#include "transport/communicator.h"
#include "transport/hierarchical_communicator.h"
#include "transport/shm/shm_communicator.h"
#include "transport/shm/shm_ring.h"

namespace hvd {
namespace {

constexpr auto kMaxSleep = std::chrono::milliseconds(100);
constexpr auto kDriverCheck = std::chrono::milliseconds(1);
constexpr auto kGpuPoll = std::chrono::microseconds(50);
// How long a stopping set waits for its GPU work, or for its members to
// finish theirs, before aborting NCCL.
constexpr auto kGpuDrain = std::chrono::seconds(2);
// A caller waiting this long on a tensor that is still being negotiated is
// "blocked" on it (told to the coordinator, for divergence detection); no
// wait on the fast path lasts this long, so it costs nothing there.
constexpr double kBlockedAfterSeconds = 0.2;
constexpr auto kBlockedCheck = std::chrono::milliseconds(50);
// Per direction of a control ring: room for the requests or responses of
// several hundred tensors; larger messages wait in the sender's outbox and
// follow as the reader makes room. Small, because a host with many ranks has
// one ring per worker in a /dev/shm that may hold only 64 MiB.
constexpr size_t kControlRingBytes = 64 * 1024;
// The most one inline allreduce makes the coordinator receive (every
// member's input): the per-tensor limit shrinks with the set's size, 4 KiB up
// to 16 members, 64 bytes at 1,024, so rank 0's link never carries what a
// collective would have spread over every link.
constexpr size_t kInlineBytesIntoCoordinator = 64 * 1024;
// How long a member whose peer closed a link under a collective waits for
// that peer's reason (kAbort, relayed by the coordinator): it is sent right
// after the peer closed its links, so this only matters when none comes.
constexpr double kPeerAbortGraceSeconds = 1.0;
// How long a synchronous allreduce waits in the fast lane for the other
// members before it withdraws and is negotiated as usual. Lane calls are for
// ranks running in step (a tight loop of small collectives); a peer later
// than this is waited for on the ordinary path, which sleeps, watches peers'
// health and answers Ctrl-C.
constexpr auto kLaneWait = std::chrono::milliseconds(2);
// Bounds the table of tensors that may use the lane (emptied when full, the
// same way on every member, since every member records the same responses).
constexpr size_t kMaxLaneEntries = 4096;

const char* kShutDownMessage =
    "Horovod has been shut down. This happens when hvd.shutdown() was called, or when a rank "
    "exited or failed; if a rank failed, its error is in the log before this message.";

}  // namespace

ProcessSetRuntime::ProcessSetRuntime(const ProcessSetContext& context, int32_t id, std::vector<int> ranks)
    : context_(context),
      id_(id),
      ranks_(std::move(ranks)),
      heartbeat_interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(context_.config.peer_timeout_seconds / 5))),
      peer_timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(context_.config.peer_timeout_seconds))) {
  auto it = std::find(ranks_.begin(), ranks_.end(), context_.global_rank);
  if (it != ranks_.end()) member_ = static_cast<int>(it - ranks_.begin());
  key_ = context_.key_prefix + "ps" + std::to_string(id_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

ProcessSetRuntime::~ProcessSetRuntime() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ProcessSetRuntime::start(const Interrupt& interrupt) {
  if (member_ < 0) return;
  const auto& cfg = context_.config;
  CommOptions options;
  options.key = key_;
  options.rank = member_;
  options.global_ranks = ranks_;
  for (int r : ranks_) options.hosts.push_back(context_.hosts[static_cast<size_t>(r)]);
  options.timeout_seconds = cfg.peer_timeout_seconds;
  options.allow_shm = cfg.allow_shm;
  options.hierarchical = cfg.hierarchical;
  options.hierarchical_allgather = cfg.hierarchical_allgather;
  options.use_mpi = cfg.use_mpi;
  options.spin = cfg.spin;
  options.interrupt = interrupt;
  comm_ = create_communicator(options, *context_.store, context_.connections);
  if (cfg.shm_lane) lane_comm_ = dynamic_cast<ShmCommunicator*>(comm_.get());
  auto duration = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  hold_window_ = duration(cfg.cycle_time_seconds);
  hold_gap_ = duration(cfg.hold_gap_seconds);
  staged_comm_ = dynamic_cast<HierarchicalCommunicator*>(comm_.get());
  Timeline* timeline = context_.global_rank == 0 ? context_.timeline : nullptr;
  executor_ = std::make_unique<Executor>(*comm_, timeline);
  host_plane_ = std::make_unique<HostDataPlane>(*comm_);
  if (member_ == 0) {
    CoordinatorConfig cc;
    cc.global_ranks = ranks_;
    cc.fusion_threshold_bytes = cfg.fusion_threshold_bytes;
    cc.cycle_time_seconds = cfg.cycle_time_seconds;
    cc.cache_capacity = cfg.cache_capacity;
    cc.stall_check_enabled = cfg.stall_check_enabled;
    cc.stall_check_seconds = cfg.stall_check_seconds;
    cc.stall_shutdown_seconds = cfg.stall_shutdown_seconds;
    cc.divergence_seconds = cfg.peer_timeout_seconds;
    cc.process_set_id = id_;
    // The autotuner scores settings by the negotiated traffic it sees, which
    // lane calls would hide from it.
    cc.lane_bytes = lane_comm_ != nullptr && !cfg.autotune.enabled ? ShmCommunicator::kLanePayloadBytes : 0;
    cc.lane_stream_bytes = cc.lane_bytes > 0 ? ShmCommunicator::kLaneStreamBytes : 0;
    coordinator_ = std::make_unique<Coordinator>(cc, timeline);
    staging_ = {cfg.hierarchical, cfg.hierarchical_allgather};
    if (cfg.autotune.enabled && id_ == 0) {
      TunedSettings initial{cfg.fusion_threshold_bytes, cfg.cycle_time_seconds, cfg.cache_capacity > 0,
                            cfg.hierarchical, cfg.hierarchical_allgather};
      autotuner_ = std::make_unique<Autotuner>(cfg.autotune, initial, staged_comm_ != nullptr,
                                               comm_->pipeline_chunk_default());
      retune(autotuner_->settings());
    }
    channels_.resize(ranks_.size());
    for (size_t m = 1; m < ranks_.size(); ++m) {
      channels_[m] = ControlChannel(context_.connections->connect(ranks_[m], key_ + "/ctrl", interrupt),
                                    rank_name(ranks_[m]), cfg.peer_timeout_seconds);
    }
  } else if (size() > 1) {
    channels_.emplace_back(context_.connections->connect(ranks_[0], key_ + "/ctrl", interrupt),
                           rank_name(ranks_[0], "coordinator of process set " + std::to_string(id_)),
                           cfg.peer_timeout_seconds);
  }
  connect_rings(interrupt);
  bool spans_hosts = false;
  for (int r : ranks_) spans_hosts = spans_hosts || context_.hosts[static_cast<size_t>(r)] != options.hosts[0];
  if (size() > 1) {
    const size_t scaled = std::min(kMaxInlineBytes, kInlineBytesIntoCoordinator / static_cast<size_t>(size()));
    inline_limit_ = cfg.inline_allreduce_bytes.value_or(spans_hosts ? scaled : 0);
  }
  thread_ = std::thread([this] { loop(); });
  if (cfg.background_core >= 0) {
    // From here, not from the thread itself: pinned before init() returns.
    cpu_set_t cores;
    CPU_ZERO(&cores);
    CPU_SET(cfg.background_core, &cores);
    int rc = pthread_setaffinity_np(thread_.native_handle(), sizeof(cores), &cores);
    if (rc != 0) {
      HVD_LOG(kWarning, "HOROVOD_THREAD_AFFINITY: cannot pin the background thread of process set "
                            << id_ << " to core " << cfg.background_core << ": " << std::strerror(rc));
    } else {
      HVD_LOG(kDebug, "background thread of process set " << id_ << " pinned to core " << cfg.background_core);
    }
  }
}

void ProcessSetRuntime::enqueue(hvd_handle* handle) {
  handle->remaining = handle->tensors.size();
  handle->driver = weak_from_this();
  std::unique_lock<std::mutex> lock(queue_mu_);
  if (member_ < 0) {
    throw_error(ErrorCode::kInvalidArgument, "rank " + std::to_string(context_.global_rank) +
                                                 " is not a member of process set " + std::to_string(id_));
  }
  if (closed_) {
    std::shared_ptr<const Error> error = closed_error_;
    lock.unlock();
    handle_fail_all(handle, *error);
    return;
  }
  auto& tensors = handle->tensors;
  // Each name is reserved as it is checked, so that one lookup also finds a
  // name repeated within the group (comparing every pair cost a 102-tensor
  // group 5,151 string comparisons a call); on a duplicate the names this
  // call reserved are given back.
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorSlot& t = tensors[i];
    if (t.meta.collective == Collective::kJoin) {
      t.meta.name = "join";
    } else if (t.meta.name.empty()) {
      uint64_t n = noname_counters_[static_cast<int>(t.meta.collective)]++;
      t.meta.name = std::string(collective_name(t.meta.collective)) + ".noname." + std::to_string(n);
    }
    if (!names_in_flight_.insert(t.meta.name).second) {
      for (size_t j = 0; j < i; ++j) names_in_flight_.erase(tensors[j].meta.name);
      throw_error(ErrorCode::kDuplicateName,
                  "Requested to " + std::string(collective_name(t.meta.collective)) + " a tensor named '" +
                      t.meta.name + "' while another tensor with the same name is still being processed " +
                      "in process set " + std::to_string(id_) + ". Wait for it to finish or use a different name.");
    }
  }
  if (tensors.size() > 1) {
    for (auto& t : tensors) {
      t.meta.group_key = tensors[0].meta.name;
      t.meta.group_size = static_cast<int32_t>(tensors.size());
    }
  }
  if (lane_comm_ != nullptr && handle->caller_waits && tensors.size() == 1) {
    const std::string& name = tensors[0].meta.name;
    lock.unlock();
    bool done = false;
    try {
      done = run_in_lane(handle);
    } catch (...) {
      lock.lock();
      names_in_flight_.erase(name);
      throw;
    }
    lock.lock();
    if (done) {
      // Free before completion, as execute() does.
      names_in_flight_.erase(name);
      lock.unlock();
      handle_complete_tensor(handle, 0, nullptr);
      return;
    }
    if (closed_) {  // the set failed while this call was in the lane
      names_in_flight_.erase(name);
      std::shared_ptr<const Error> error = closed_error_;
      lock.unlock();
      handle_fail_all(handle, *error);
      return;
    }
  }
  // A single-tensor allreduce that no one waits for starts a hold in an
  // empty queue (process_set.h), and each one that follows moves its end.
  // One whose submitter is blocked on it (a framework's eagerly run op: it
  // is waited on from the start, though by no caller that drives) cannot be
  // followed by more, so it is not held.
  const bool holdable = hold_window_ > Clock::duration::zero() && hold_gap_ > Clock::duration::zero() &&
                        !handle->caller_waits && handle->waiters.load(std::memory_order_relaxed) == 0 &&
                        tensors.size() == 1 && tensors[0].meta.collective == Collective::kAllreduce;
  const bool extends_hold = holdable && queue_held_.load();
  if (holdable && (queue_.empty() || extends_hold)) {
    const auto now = Clock::now();
    if (!extends_hold) hold_started_ = now;
    hold_until_.store(std::min(hold_started_ + hold_window_, now + hold_gap_).time_since_epoch().count());
    queue_held_.store(true);
  } else if (queue_held_.load(std::memory_order_relaxed)) {
    queue_held_.store(false);
  }
  queue_.push_back(handle);
  queue_nonempty_.store(true);
  lock.unlock();
  // A caller that will wait runs the engine itself (when callers drive at
  // all); anything else needs the background thread, which a hold in
  // progress has already told when to look (it looks again when the end it
  // knew comes, before the moved one).
  bool caller_drives = handle->caller_waits && callers_may_drive();
  if (!caller_drives && !extends_hold && sleeping_.load()) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
    (void)ignored;
  }
}

bool ProcessSetRuntime::run_in_lane(hvd_handle* handle) {
  TensorSlot& t = handle->tensors[0];
  const RequestMeta& meta = t.meta;
  const bool broadcast = meta.collective == Collective::kBroadcast;
  const bool allgather = meta.collective == Collective::kAllgather;
  const bool reducescatter = meta.collective == Collective::kReducescatter;
  if ((meta.collective != Collective::kAllreduce && !broadcast && !allgather && !reducescatter) ||
      meta.device != Device::kCpu || meta.reduce_op == HVD_OP_ADASUM || t.input == nullptr) {
    return false;
  }
  // Allgather and reducescatter results are the engine's to allocate (a
  // caller's allocator is left to the negotiated path, which calls it
  // exactly once); the others write into the caller's output.
  const bool sized_by_engine = allgather || reducescatter;
  if (sized_by_engine ? t.output != nullptr || handle->alloc != nullptr : t.output == nullptr) return false;
  if (sized_by_engine && meta.shape.empty()) return false;
  uint64_t key = 0, occurrence = 0;
  {
    std::lock_guard<std::mutex> lock(lane_mu_);
    auto it = lane_entries_.find(meta.name);
    if (it == lane_entries_.end()) return false;
    const LaneEntry& e = it->second;
    // The request must be the one that was negotiated (every field the
    // coordinator checks), or it is negotiated again and mismatches reported.
    if (e.collective != meta.collective || e.dtype != meta.dtype || e.shape != meta.shape || meta.group_size > 1 ||
        (broadcast ? e.root_rank != meta.root_rank
                   : e.reduce_op != meta.reduce_op || e.prescale != meta.prescale || e.postscale != meta.postscale)) {
      return false;
    }
    key = e.key;
    occurrence = e.occurrence;
  }
  const size_t count = static_cast<size_t>(num_elements(meta.shape));
  if (allgather) {
    // Every member's piece has the negotiated shape (the coordinator gives
    // allgathers a key only when all shapes are equal).
    std::vector<int64_t> out_shape = meta.shape;
    out_shape[0] *= size();
    OwnedLaneResult owned = owned_lane_result(out_shape, meta.dtype);
    if (!owned || lane_comm_->lane_allgather(key, occurrence, t.input, owned->dl_tensor.data,
                                             count * dtype_size(meta.dtype),
                                             kLaneWait) != ShmCommunicator::LaneOutcome::kDone) {
      return false;
    }
    t.owned_result = owned.release();
    return lane_call_done(t, meta.name, key, t.owned_result->dl_tensor.data);
  }
  if (broadcast) {
    if (lane_comm_->lane_broadcast(key, occurrence, t.input, t.output, count * dtype_size(meta.dtype),
                                   meta.root_rank, kLaneWait) != ShmCommunicator::LaneOutcome::kDone) {
      return false;
    }
    return lane_call_done(t, meta.name, key, t.output);
  }
  const void* input = t.input;
  if (meta.prescale != 1.0) {
    thread_local std::vector<unsigned char> prescaled;
    prescaled.resize(count * dtype_size(meta.dtype));
    scale_copy(prescaled.data(), t.input, count, meta.dtype, meta.prescale);
    input = prescaled.data();
  }
  const double post = result_scale(meta.reduce_op, meta.postscale, size());  // as the executor applies it
  if (reducescatter) {
    // This member's rows, split as the executor splits them; `before`: the
    // rows of the members ahead of it.
    const int64_t rows = meta.shape[0], me = lane_comm_->rank();
    const size_t row = static_cast<size_t>(count / static_cast<size_t>(rows > 0 ? rows : 1));
    int64_t before = 0;
    for (int64_t m = 0; m < me; ++m) before += scattered_rows(rows, size(), m);
    std::vector<int64_t> out_shape = meta.shape;
    out_shape[0] = scattered_rows(rows, size(), me);
    const size_t mine = static_cast<size_t>(out_shape[0]) * row;
    OwnedLaneResult owned = owned_lane_result(out_shape, meta.dtype);
    if (!owned || lane_comm_->lane_reducescatter(key, occurrence, input, count, owned->dl_tensor.data,
                                                 static_cast<size_t>(before) * row, mine, meta.dtype,
                                                 transport_op(meta.reduce_op),
                                                 kLaneWait) != ShmCommunicator::LaneOutcome::kDone) {
      return false;
    }
    t.owned_result = owned.release();
    void* out = t.owned_result->dl_tensor.data;
    if (post != 1.0 && mine > 0) scale_copy(out, out, mine, meta.dtype, post);
    return lane_call_done(t, meta.name, key, out);
  }
  if (lane_comm_->lane_allreduce(key, occurrence, input, t.output, count, meta.dtype, transport_op(meta.reduce_op),
                                 post, kLaneWait) != ShmCommunicator::LaneOutcome::kDone) {
    return false;
  }
  return lane_call_done(t, meta.name, key, t.output);
}

void ProcessSetRuntime::retune(const TunedSettings& s) {
  coordinator_->retune(s.fusion_threshold_bytes, s.cycle_time_seconds, s.cache_enabled);
  staging_ = {s.hierarchical_allreduce, s.hierarchical_allgather};
  pipeline_chunk_bytes_ = static_cast<uint32_t>(s.pipeline_chunk_bytes);
  cycle_time_us_ = static_cast<uint32_t>(std::llround(s.cycle_time_seconds * 1e6));
}

void ProcessSetRuntime::follow_cycle_time(uint32_t us) {
  followed_cycle_time_us_ = us;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    hold_window_ = std::chrono::microseconds(us);
  }
  HVD_LOG(kInfo, "autotune: process set " << id_ << " holds a burst of asynchronous allreduces for at most "
                                          << us / 1000.0 << " ms");
}

void ProcessSetRuntime::exchange_gradient_bucket() {
  std::lock_guard<std::mutex> lock(bucket_mu_);
  if (bucket_.configured_bytes >= 0) {
    autotuner_->declare_gradient_bucket(bucket_.configured_bytes, bucket_.total_bytes);
  }
  bucket_.tuned_bytes = autotuner_->settings().gradient_bucket_bytes;
  bucket_.over = autotuner_->done();
}

int ProcessSetRuntime::autotune_gradient_bucket(int64_t configured_bytes, int64_t total_bytes, int64_t* bytes) {
  *bytes = configured_bytes;
  if (!context_.config.autotune.enabled) return 0;
  std::lock_guard<std::mutex> lock(bucket_mu_);
  if (bucket_.configured_bytes < 0) {
    bucket_.configured_bytes = configured_bytes;
    bucket_.total_bytes = total_bytes;
  }
  if (bucket_.tuned_bytes >= 0) *bytes = bucket_.tuned_bytes;
  return bucket_.over ? 2 : 1;
}

void ProcessSetRuntime::FreeOwned::operator()(DLManagedTensor* t) const { t->deleter(t); }

// A result the engine allocates for a lane call, or null when allocation
// failed (the negotiated path then reports it).
ProcessSetRuntime::OwnedLaneResult ProcessSetRuntime::owned_lane_result(const std::vector<int64_t>& shape,
                                                                        DataType dtype) {
  try {
    return OwnedLaneResult(make_owned_tensor(shape, dtype));
  } catch (const Error&) {
    return nullptr;
  }
}

bool ProcessSetRuntime::lane_call_done(TensorSlot& t, const std::string& name, uint64_t key, void* result) {
  t.result_data = result;
  fast_lane_calls_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(lane_mu_);
  auto it = lane_entries_.find(name);
  if (it != lane_entries_.end() && it->second.key == key) ++it->second.occurrence;
  return true;
}

void ProcessSetRuntime::record_lane_key(const Response& r) {
  if (r.names.size() != 1 || (r.collective != Collective::kAllreduce && r.collective != Collective::kBroadcast &&
                              r.collective != Collective::kAllgather && r.collective != Collective::kReducescatter)) {
    return;
  }
  const std::string& name = r.names[0];
  std::lock_guard<std::mutex> lock(lane_mu_);
  auto it = lane_entries_.find(name);
  if (r.lane_key == 0) {
    if (it != lane_entries_.end()) lane_entries_.erase(it);
    return;
  }
  // From the response alone, so every member (one that joined and has no
  // tensor here too) keeps the same entries and counts: lane calls match by
  // (key, occurrence).
  if (it != lane_entries_.end() && it->second.key == r.lane_key) {
    ++it->second.occurrence;
    return;
  }
  if (it == lane_entries_.end()) {
    if (lane_entries_.size() >= kMaxLaneEntries) lane_entries_.clear();
    it = lane_entries_.emplace(name, LaneEntry{}).first;
  }
  LaneEntry& e = it->second;
  e.key = r.lane_key;
  e.occurrence = 1;
  e.collective = r.collective;
  e.root_rank = r.root_rank;
  e.dtype = r.dtype;
  e.reduce_op = r.reduce_op;
  e.prescale = r.prescale;
  e.postscale = r.postscale;
  e.shape = r.shapes[0];
}

// Members on the coordinator's host move their control channel onto a
// shared-memory ring. The coordinator offers one per such worker (its name
// and a random nonce, over the authenticated connection); the worker
// attaches and checks the nonce, which fails harmlessly when the host name
// is shared by another machine, and says whether it did. Both switch right
// after that answer, so no message can be on the other path.
void ProcessSetRuntime::connect_rings(const Interrupt& interrupt) {
  const auto& cfg = context_.config;
  const double timeout = std::max(cfg.peer_timeout_seconds, 10.0);
  MessageType type;
  std::string payload;
  if (member_ == 0) {
    std::vector<std::string> names(ranks_.size());
    std::vector<std::unique_ptr<ShmRing>> rings(ranks_.size());
    for (size_t m = 1; m < ranks_.size(); ++m) {
      std::string offer;
      if (cfg.control_over_shm && context_.hosts[static_cast<size_t>(ranks_[m])] ==
                                      context_.hosts[static_cast<size_t>(context_.global_rank)]) {
        names[m] = ShmRing::name_for(key_ + "/ctrl/" + std::to_string(m));
        const std::string nonce = random_hex(16);
        try {
          rings[m] = ShmRing::create(names[m], kControlRingBytes, nonce);
          offer = nonce + names[m];
        } catch (const Error& e) {
          HVD_LOG(kDebug, "process set " << id_ << ": no control ring for member " << m << ": " << e.what());
        }
      }
      channels_[m].send(MessageType::kRingOffer, offer);
    }
    try {
      for (size_t m = 1; m < ranks_.size(); ++m) {
        channels_[m].receive(&type, &payload, timeout, interrupt);
        if (type != MessageType::kRingReply) {
          throw_error(ErrorCode::kInternal, channels_[m].peer() + " did not answer the control-ring offer");
        }
        if (rings[m]) {
          ShmRing::unlink(names[m]);
          if (payload == "1") channels_[m].use_ring(std::move(rings[m]));
          rings[m].reset();
        }
      }
    } catch (...) {
      // No name may outlive a failed start (the worker unlinks too, once attached).
      for (size_t m = 1; m < ranks_.size(); ++m) {
        if (rings[m]) ShmRing::unlink(names[m]);
      }
      throw;
    }
  } else if (size() > 1) {
    channels_[0].receive(&type, &payload, timeout, interrupt);
    if (type != MessageType::kRingOffer) {
      throw_error(ErrorCode::kInternal, channels_[0].peer() + " did not send its control-ring offer");
    }
    std::unique_ptr<ShmRing> ring;
    if (payload.size() > 32) {
      std::string why;
      ring = ShmRing::attach(payload.substr(32), payload.substr(0, 32), &why);
      if (ring) ShmRing::unlink(payload.substr(32));  // mapped: the name is no longer needed
      else HVD_LOG(kDebug, "process set " << id_ << ": control ring not used: " << why);
    }
    channels_[0].send(MessageType::kRingReply, ring ? "1" : "0");
    if (ring) channels_[0].use_ring(std::move(ring));
  }
}

void ProcessSetRuntime::stop() {
  stop_requested_.store(true);
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
}

void ProcessSetRuntime::abort(const Error& error) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!abort_error_) abort_error_ = std::make_shared<const Error>(error);
  }
  abort_requested_.store(true);
  if (comm_) comm_->abort(error.what());
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

std::shared_ptr<const Error> ProcessSetRuntime::failure() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return closed_ ? closed_error_ : departure_;
}

void ProcessSetRuntime::release_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  names_in_flight_.erase(name);
}

void ProcessSetRuntime::guarded_step() {
  try {
    step();
  } catch (const Error& e) {
    fail(e);
  } catch (const std::exception& e) {
    fail(Error(ErrorCode::kInternal, std::string("unexpected error in the background thread of process set ") +
                                         std::to_string(id_) + ": " + e.what()));
  }
}

void ProcessSetRuntime::step() {
  if (abort_requested_.load()) {
    std::shared_ptr<const Error> error;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      error = abort_error_;
    }
    fail(*error);
    return;
  }
  if (stop_requested_.load()) {
    // Collectives already queued on the GPU finish normally (a moment).
    drain_gpu(kGpuDrain);
    // Tell the peers this is a clean exit (the coordinator tells every
    // worker, a worker its coordinator); a peer that is gone already needs
    // no telling.
    for (auto& ch : channels_) {
      if (!ch.open()) continue;
      try {
        ch.send(MessageType::kGoodbye, "");
      } catch (const Error&) {
      }
    }
    if (member_ == 0 && gpu_plane_ && gpu_plane_->uses_nccl()) await_members_leaving(kGpuDrain);
    fail_everything(Error(ErrorCode::kInternal, kShutDownMessage));
    finished_ = true;
    return;
  }
  if (gpu_plane_) gpu_plane_->poll();
  if (member_ == 0) step_coordinator();
  else step_worker();
}

bool ProcessSetRuntime::drive_once() {
  std::unique_lock<std::mutex> lock(drive_mu_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return false;
  guarded_step();
  return true;
}

void ProcessSetRuntime::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void ProcessSetRuntime::loop() {
  {
    std::lock_guard<std::mutex> lock(drive_mu_);
    next_stall_check_ = Clock::now() + std::chrono::seconds(1);
    wake_at_ = Clock::time_point::max();
  }
  for (;;) {
    if (finished_.load()) return;
    if (active_drivers_.load() > 0 && !stop_requested_.load() && !abort_requested_.load()) {
      // A caller is running the engine: keep out of its way (waking up for
      // its messages would only steal its CPU), but look again soon.
      wait_for_events({pollfd{wake_fd_, POLLIN, 0}}, Clock::now() + kDriverCheck);
      continue;
    }
    std::vector<pollfd> fds;
    Clock::time_point deadline;
    {
      std::lock_guard<std::mutex> lock(drive_mu_);
      if (finished_) return;
      background_step_ = true;
      guarded_step();
      background_step_ = false;
      if (finished_) return;
      // While the GPU works on queued collectives, look often: their
      // handles complete when this thread (or a waiting caller) sees it.
      deadline = std::min(wake_at_, Clock::now() + (gpu_plane_ && gpu_plane_->pending() ? kGpuPoll : kMaxSleep));
      fds.push_back(pollfd{wake_fd_, POLLIN, 0});
      for (auto& ch : channels_) {
        if (!ch.open()) continue;
        fds.push_back(pollfd{ch.fd(), POLLIN, 0});
        // A ring's peer rings the doorbell only for a reader that said it sleeps.
        if (!ch.prepare_to_sleep()) deadline = Clock::now();
        if (ch.has_unsent()) deadline = std::min(deadline, Clock::now() + kDriverCheck);
      }
    }
    wait_for_events(std::move(fds), deadline);
    std::lock_guard<std::mutex> lock(drive_mu_);
    for (auto& ch : channels_) ch.awake();
  }
}

// Sleeps until there is something to do: a local request, a message on a
// control channel, stop/abort, or the deadline (heartbeats, cycle time).
// Callers that wait for a result drive the engine themselves, so the
// background thread never needs to spin.
void ProcessSetRuntime::wait_for_events(std::vector<pollfd> fds, Clock::time_point deadline) {
  auto ready_now = [&] {
    return (queue_nonempty_.load() && !queue_held_.load()) || stop_requested_.load() || abort_requested_.load();
  };
  sleeping_.store(true);
  // After sleeping_ is set: an enqueue either sees it and rings, or its hold is seen here.
  if (queue_held_.load()) deadline = std::min(deadline, Clock::time_point(Clock::duration(hold_until_.load())));
  if (ready_now()) {
    sleeping_.store(false);
    return;
  }
  auto wait = deadline - Clock::now();
  if (wait < Clock::duration::zero()) wait = Clock::duration::zero();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  sleeping_.store(false);
  uint64_t drained;
  ssize_t ignored = ::read(wake_fd_, &drained, sizeof(drained));
  (void)ignored;
}

bool ProcessSetRuntime::queue_still_held() const {
  return queue_held_.load() && Clock::now().time_since_epoch().count() < hold_until_.load();
}

void ProcessSetRuntime::drain_queue(std::vector<RequestMeta>* metas) {
  // Most steps of a waiting caller find nothing new: skip the lock. A handle
  // enqueued just after this load is taken by the next step.
  if (!queue_nonempty_.load(std::memory_order_acquire)) return;
  std::vector<hvd_handle*> taken;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (background_step_ && queue_still_held()) return;
    taken.swap(queue_);
    queue_nonempty_.store(false);
    queue_held_.store(false);
  }
  if (!taken.empty()) request_batches_.fetch_add(1, std::memory_order_relaxed);
  const size_t inline_limit = inline_limit_;
  for (hvd_handle* h : taken) {
    for (size_t i = 0; i < h->tensors.size(); ++i) {
      const TensorSlot& slot = h->tensors[i];
      const RequestMeta& meta = slot.meta;
      if (meta.collective == Collective::kJoin) {
        join_handle_ = h;
        if (lane_comm_ != nullptr) lane_comm_->set_lane_joined(true);
      }
      else in_flight_[meta.name] = LocalTensor{h, i};
      metas->push_back(meta);
      if (meta.collective == Collective::kAllreduce && meta.device == Device::kCpu &&
          meta.reduce_op != HVD_OP_ADASUM && slot.input != nullptr) {
        size_t count = 1;
        for (auto d : meta.shape) count *= static_cast<size_t>(d);
        const size_t bytes = count * dtype_size(meta.dtype);
        if (bytes > 0 && bytes <= inline_limit) {
          std::string& data = metas->back().inline_data;
          data.resize(bytes);
          if (meta.prescale == 1.0) std::memcpy(data.data(), slot.input, bytes);
          else scale_copy(data.data(), slot.input, count, meta.dtype, meta.prescale);
        }
      }
    }
  }
}

void ProcessSetRuntime::execute(const std::vector<Response>& responses) {
  for (const auto& r : responses) {
    if (r.collective == Collective::kJoin && r.kind == Response::Kind::kExecute) {
      if (join_handle_ != nullptr) {
        hvd_handle* h = join_handle_;
        join_handle_ = nullptr;
        if (lane_comm_ != nullptr) lane_comm_->set_lane_joined(false);
        h->last_joined_rank = r.last_joined_rank;
        release_name("join");
        handle_complete_tensor(h, 0, nullptr);
      }
      continue;
    }
    if (r.kind == Response::Kind::kError) {
      const std::vector<int> at_fault(r.error_ranks.begin(), r.error_ranks.end());
      for (const auto& name : r.names) {
        auto it = in_flight_.find(name);
        if (it == in_flight_.end()) continue;
        LocalTensor local = it->second;
        in_flight_.erase(it);
        release_name(name);
        Error error(static_cast<ErrorCode>(r.error_code), r.error_message, name, at_fault);
        handle_complete_tensor(local.handle, local.index, &error);
      }
      continue;
    }
    // Reused between responses: most responses name one tensor, and their
    // steady state should not allocate.
    std::vector<LocalTensor>& locals = execute_locals_;
    std::vector<InFlight::iterator>& found = execute_found_;
    locals.clear();
    found.clear();
    bool joined = std::find(r.joined_ranks.begin(), r.joined_ranks.end(), member_) != r.joined_ranks.end();
    for (const auto& name : r.names) {
      auto it = in_flight_.find(name);
      if (it != in_flight_.end()) {
        locals.push_back(it->second);
        found.push_back(it);
      } else if (joined) {
        locals.push_back(LocalTensor{});
      } else {
        throw_error(ErrorCode::kInternal, "the coordinator scheduled tensor '" + name +
                                              "' which this rank never submitted (protocol error)");
      }
    }
    // Names are free again before completion, so a caller woken by the
    // completion may immediately reuse the name.
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      for (auto it : found) names_in_flight_.erase(it->first);
    }
    GpuDataPlane* gpu = r.device == Device::kCuda ? &gpu_plane(locals) : nullptr;
    DataPlane& plane = gpu != nullptr ? static_cast<DataPlane&>(*gpu) : *host_plane_;
    if (staged_comm_ != nullptr) staged_comm_->set_staging(r.hierarchical_allreduce, r.hierarchical_allgather);
    comm_->set_pipeline_chunk_bytes(r.pipeline_chunk_bytes);
    if (r.cycle_time_us != 0 && r.cycle_time_us != followed_cycle_time_us_) follow_cycle_time(r.cycle_time_us);
    try {
      if (gpu != nullptr) gpu->begin(r, locals);
      executor_->run(r, locals, plane);
    } catch (...) {
      // Every tensor of the response is still in in_flight_, failed from there.
      plane.discard_completions();
      throw;
    }
    if (lane_comm_ != nullptr) record_lane_key(r);
    for (auto it : found) in_flight_.erase(it);
    if (gpu != nullptr) {
      gpu->end();  // completed by poll() once the GPU is done
    } else {
      for (Completion& c : plane.completions()) {
        handle_complete_tensor(c.local.handle, c.local.index, c.error ? &*c.error : nullptr);
      }
      plane.completions().clear();
    }
  }
  // A collective that completed proves its peers alive.
  for (auto& ch : channels_) ch.touch_received();
}

GpuDataPlane& ProcessSetRuntime::gpu_plane(const std::vector<LocalTensor>& locals) {
  if (!gpu_plane_) {
    // A rank that joined has no tensor of its own: it uses the GPU of its
    // latest CUDA tensor.
    int device = last_cuda_device();
    for (const LocalTensor& l : locals) {
      if (l.handle != nullptr) {
        device = l.handle->tensors[l.index].device_id;
        break;
      }
    }
    GpuOptions options;
    options.use_nccl = context_.config.gpu_use_nccl;
    options.host_name = context_.hosts[static_cast<size_t>(context_.global_rank)];
    options.global_ranks = ranks_;
    options.hierarchical_allreduce = context_.config.gpu_hierarchical;
    for (int r : ranks_) options.hosts.push_back(context_.hosts[static_cast<size_t>(r)]);
    options.make_host_comm = [this](const std::vector<int>& members, const std::string& purpose) {
      const auto& cfg = context_.config;
      CommOptions o;
      o.key = key_ + "/" + purpose;
      o.rank = static_cast<int>(std::find(members.begin(), members.end(), member_) - members.begin());
      for (int m : members) {
        o.global_ranks.push_back(ranks_[static_cast<size_t>(m)]);
        o.hosts.push_back(context_.hosts[static_cast<size_t>(ranks_[static_cast<size_t>(m)])]);
      }
      o.timeout_seconds = cfg.peer_timeout_seconds;
      o.allow_shm = cfg.allow_shm;
      o.hierarchical = false;
      o.hierarchical_allgather = false;
      o.use_mpi = cfg.use_mpi;
      o.spin = cfg.spin;
      return create_communicator(o, *context_.store, context_.connections);
    };
    gpu_plane_ = std::make_unique<GpuDataPlane>(*comm_, device, options);
  }
  return *gpu_plane_;
}

std::string ProcessSetRuntime::rank_name(int global_rank, const std::string& role) const {
  std::string where;
  if (global_rank >= 0 && static_cast<size_t>(global_rank) < context_.hosts.size()) {
    where = "host " + context_.hosts[static_cast<size_t>(global_rank)];
  }
  if (!role.empty()) where += (where.empty() ? "" : ", ") + role;
  return "rank " + std::to_string(global_rank) + (where.empty() ? "" : " (" + where + ")");
}

void ProcessSetRuntime::check_heartbeats(Clock::time_point now) {
  const double timeout = context_.config.peer_timeout_seconds;
  for (size_t i = 0; i < channels_.size(); ++i) {
    ControlChannel& ch = channels_[i];
    if (!ch.open()) continue;
    if (now - ch.last_sent() > heartbeat_interval_) ch.send(MessageType::kHeartbeat, "");
    if (now - ch.last_received() > peer_timeout_) {
      const std::string reason = ch.peer() + " sent nothing for " + std::to_string(static_cast<int>(timeout)) +
                                 " s: it is frozen, unreachable or dead (HOROVOD_PEER_TIMEOUT_SECONDS=" +
                                 std::to_string(timeout) + ")";
      throw_error(ErrorCode::kInternal, reason, "", {ranks_[i]});
    }
  }
}

void ProcessSetRuntime::refresh_blocked(Clock::time_point now) {
  if (now < next_blocked_check_) return;
  next_blocked_check_ = now + kBlockedCheck;
  std::vector<std::string> names;
  const int64_t now_ns = steady_now_ns();
  for (const auto& [name, local] : in_flight_) {
    if (handle_blocked_since(local.handle, now_ns, kBlockedAfterSeconds, context_.config.stall_check_seconds)) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  if (names != blocked_) {
    blocked_ = std::move(names);
    blocked_reported_ = false;
  }
}

void ProcessSetRuntime::step_coordinator() {
  auto now = Clock::now();
  std::vector<RequestMeta> metas;
  drain_queue(&metas);
  for (const auto& m : metas) coordinator_->add_request(0, m, now);
  MessageType type;
  std::string payload;
  for (size_t m = 1; m < channels_.size(); ++m) {
    while (channels_[m].open() && channels_[m].try_receive(&type, &payload)) {
      if (type == MessageType::kRequests) {
        for (auto& meta : decode_requests(payload)) coordinator_->add_request(static_cast<int>(m), std::move(meta), now);
      } else if (type == MessageType::kWaiting) {
        coordinator_->set_waiting(static_cast<int>(m), decode_names(payload), now);
      } else if (type == MessageType::kGoodbye) {
        coordinator_->member_left(static_cast<int>(m));
        channels_[m].close();
      } else if (type == MessageType::kAbort) {
        // A member failed (it lost a peer of its own): the same cause ends
        // the set everywhere, rather than its departure hiding it.
        channels_[m].close();
        throw decode_failure(payload);
      }
    }
  }
  refresh_blocked(now);
  if (!blocked_reported_) {
    coordinator_->set_waiting(0, blocked_, now);
    blocked_reported_ = true;
  }
  std::string diverged = coordinator_->inspect_divergence(now);
  if (!diverged.empty()) throw_error(ErrorCode::kInternal, diverged, "", ranks_);
  if (coordinator_->members_left()) {
    std::string departed = coordinator_->departure();
    auto departure = std::make_shared<const Error>(ErrorCode::kInternal, departed, "", coordinator_->left_ranks());
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      departure_ = departure;
    }
    // A job that is simply ending submits nothing more: no failure to report.
    // Anything submitted now can never complete: fail the set on every rank.
    if (!coordinator_->idle()) throw *departure;
  }
  wake_at_ = Clock::time_point::max();
  auto responses = coordinator_->take_responses(now, &wake_at_);
  if (autotuner_) {
    if (autotuner_->observe(responses, Clock::now())) retune(autotuner_->settings());
    exchange_gradient_bucket();
  }
  for (Response& r : responses) {
    r.hierarchical_allreduce = staging_.first;
    r.hierarchical_allgather = staging_.second;
    r.pipeline_chunk_bytes = pipeline_chunk_bytes_;
    r.cycle_time_us = cycle_time_us_;
  }
  if (!responses.empty()) {
    if (channels_.size() > 1) {  // a one-member set has no one to tell
      std::string encoded = encode_responses(responses);
      for (size_t m = 1; m < channels_.size(); ++m) {
        if (channels_[m].open()) channels_[m].send(MessageType::kResponses, encoded);
      }
    }
    execute(responses);
    now = Clock::now();  // a large collective may have taken long
  }
  check_heartbeats(now);
  if (now >= next_stall_check_) {
    next_stall_check_ = now + std::chrono::seconds(1);
    std::string fatal = coordinator_->inspect_stalls(now);
    if (!fatal.empty()) throw_error(ErrorCode::kInternal, fatal);
  }
}

void ProcessSetRuntime::step_worker() {
  std::vector<RequestMeta> metas;
  drain_queue(&metas);
  if (!metas.empty()) channels_[0].send(MessageType::kRequests, encode_requests(metas));
  // After the requests on the same channel: the coordinator always knows a
  // tensor before hearing that this rank is blocked on it.
  auto now = Clock::now();
  refresh_blocked(now);
  if (!blocked_reported_) {
    channels_[0].send(MessageType::kWaiting, encode_names(blocked_));
    blocked_reported_ = true;
  }
  MessageType type;
  std::string payload;
  bool executed = false;
  while (channels_[0].open() && channels_[0].try_receive(&type, &payload)) {
    if (type == MessageType::kResponses) {
      execute(decode_responses(payload));
      executed = true;
    } else if (type == MessageType::kGoodbye) {
      // The coordinator finished its part of every collective, but this
      // rank's part of the last ones may still run on the GPU (NCCL hands
      // over the last bytes after the sender's kernel ended): let it end
      // before counting what was lost. Closing the channel then tells the
      // coordinator this rank needs nothing more from its NCCL.
      drain_gpu(kGpuDrain);
      channels_[0].close();
      std::string reason = rank_name(ranks_[0], "coordinator of process set " + std::to_string(id_)) +
                           " has shut down. " + kShutDownMessage;
      if (in_flight_.empty() && join_handle_ == nullptr && !queue_nonempty_.load()) {
        // The job is ending normally: nothing was lost, so nothing to report.
        fail_everything(Error(ErrorCode::kInternal, reason, "", {ranks_[0]}));
        finished_ = true;
        return;
      }
      throw_error(ErrorCode::kInternal, reason, "", {ranks_[0]});
    } else if (type == MessageType::kAbort) {
      channels_[0].close();
      throw decode_failure(payload);
    }
  }
  if (executed) now = Clock::now();  // a large collective may have taken long
  check_heartbeats(now);
}

void ProcessSetRuntime::drain_gpu(Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  while (gpu_plane_ && gpu_plane_->pending()) {
    gpu_plane_->poll();
    if (!gpu_plane_->pending() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(kGpuPoll);
  }
}

void ProcessSetRuntime::await_members_leaving(Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  MessageType type;
  std::string payload;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    for (size_t m = 1; m < channels_.size(); ++m) {
      auto& ch = channels_[m];
      try {
        // A member leaves by closing its link (after its GPU work ended) or
        // by saying goodbye itself; whatever else it says no longer matters.
        while (ch.open() && ch.try_receive(&type, &payload)) {
          if (type == MessageType::kGoodbye || type == MessageType::kAbort) ch.close();
        }
      } catch (const Error&) {
        // try_receive closed the channel: the member is gone.
      }
      if (ch.open()) fds.push_back(pollfd{ch.fd(), POLLIN, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) return;
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 2)));
  }
}

void ProcessSetRuntime::fail_everything(const Error& error) {
  std::vector<hvd_handle*> queued;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    closed_ = true;
    closed_error_ = std::make_shared<const Error>(error);
    queued.swap(queue_);
    queue_nonempty_.store(false);
    queue_held_.store(false);
    names_in_flight_.clear();
  }
  std::vector<hvd_handle*> handles = queued;
  for (auto& [name, local] : in_flight_) {
    if (std::find(handles.begin(), handles.end(), local.handle) == handles.end()) handles.push_back(local.handle);
  }
  if (join_handle_ != nullptr && std::find(handles.begin(), handles.end(), join_handle_) == handles.end()) {
    handles.push_back(join_handle_);
  }
  in_flight_.clear();
  join_handle_ = nullptr;
  for (hvd_handle* h : handles) handle_fail_all(h, error);
  // Collectives already queued on the GPU: NCCL's part is aborted (a peer
  // may never come), their handles fail.
  if (gpu_plane_) gpu_plane_->abort(error);
}

std::optional<Error> ProcessSetRuntime::peer_abort_within(double seconds) {
  const auto deadline = deadline_after(seconds);
  MessageType type;
  std::string payload;
  std::vector<pollfd> fds;
  size_t open_at_start = 0;
  for (auto& ch : channels_) open_at_start += ch.open() ? 1 : 0;
  for (;;) {
    fds.clear();
    for (auto& ch : channels_) {
      try {
        while (ch.open() && ch.try_receive(&type, &payload)) {
          if (type == MessageType::kAbort) return decode_failure(payload);
          // Anything else no longer matters: this set is failing.
        }
      } catch (const Error&) {
        // try_receive closed the channel, or the abort did not decode.
      }
      if (ch.open()) fds.push_back(pollfd{ch.fd(), POLLIN, 0});
    }
    // A peer that went without a word (killed) explains the closed link
    // itself: no one will say more, so waiting on would only delay.
    if (fds.size() < open_at_start) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) return std::nullopt;
    // Short sleeps: a ring's bytes come without waking the socket.
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 2)));
  }
}

void ProcessSetRuntime::fail(const Error& first_error) {
  // A peer that closed a link under a collective has usually failed and said
  // why on its control channel (the coordinator relays what a member says):
  // report that cause, as the peer does, rather than "connection closed".
  std::optional<Error> peer_cause;
  if (dynamic_cast<const LinkClosed*>(&first_error) != nullptr) {
    peer_cause = peer_abort_within(std::min(kPeerAbortGraceSeconds, context_.config.peer_timeout_seconds));
  }
  const Error& error = peer_cause ? *peer_cause : first_error;
  const std::string reason = error.what();
  HVD_LOG(kError, "process set " << id_ << " failed: " << reason);
  // The coordinator tells every member why; a member tells the coordinator,
  // which passes it on, so every rank reports the first cause.
  for (auto& ch : channels_) {
    if (!ch.open()) continue;
    try {
      ch.send(MessageType::kAbort, encode_failure(error));
    } catch (const Error&) {
    }
  }
  if (comm_) comm_->abort(reason);
  for (auto& ch : channels_) ch.close();
  Error failure(ErrorCode::kInternal, reason, error.tensor(), error.ranks());
  fail_everything(failure);
  finished_ = true;
  if (context_.on_fatal) context_.on_fatal(failure);
}

}  // namespace hvd
