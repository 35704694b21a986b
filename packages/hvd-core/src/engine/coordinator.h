// coordinator.h - negotiation on a process set's coordinator (member 0).
//
// Every member reports each tensor it wants to run. A tensor is ready when
// every member that has not joined reported it; a group when all its tensors
// are ready. Ready tensors are cross-checked (collective, dtype, shape, op,
// root, scale factors, group) and turned into Responses; compatible
// allreduces are fused up to HOROVOD_FUSION_THRESHOLD bytes. Responses go to
// every member, which all execute them in the same order.
//
// This class is pure bookkeeping (no I/O, no threads), driven by the
// process set's background thread, so it can be tested on its own.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace hvd {

class Timeline;
using Clock = std::chrono::steady_clock;

struct CoordinatorConfig {
  std::vector<int> global_ranks;  // member -> global rank, for messages
  int64_t fusion_threshold_bytes = kDefaultFusionThresholdBytes;
  double cycle_time_seconds = 0.001;
  size_t cache_capacity = 1024;
  bool stall_check_enabled = true;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;  // 0: never
  // Every member blocked on tensors that cannot complete, with nothing
  // changing for this long, is divergence (see inspect_divergence).
  double divergence_seconds = 5;  // HOROVOD_PEER_TIMEOUT_SECONDS; 0: never
  int process_set_id = 0;
  // The members share a fast lane of at most this many bytes per tensor
  // (0: none): uniform small allreduces get a lane key in their response.
  size_t lane_bytes = 0;
  // Broadcasts and allgathers (bytes per member) up to this many bytes get
  // one too: the lane streams what does not fit (0: lane_bytes).
  size_t lane_stream_bytes = 0;
};

class Coordinator {
 public:
  Coordinator(CoordinatorConfig config, Timeline* timeline);

  void add_request(int member, RequestMeta meta, Clock::time_point now);
  // A member shut down cleanly: the set can complete nothing any more.
  void member_left(int member);
  // Why the set is unusable because members left; empty when none did.
  std::string departure() const;
  bool members_left() const { return !left_.empty(); }
  // The global ranks of the members that left.
  std::vector<int> left_ranks() const;
  // Nothing is pending and nobody waits in join.
  bool idle() const;
  // The responses to run now, in order. When ready allreduces are held back
  // to fuse with tensors that other ranks are about to submit (at most
  // HOROVOD_CYCLE_TIME), *wake_at says when to call again.
  std::vector<Response> take_responses(Clock::time_point now, Clock::time_point* wake_at);
  // The tensors `member` is blocked on (a caller has waited on them for a
  // while); empty when it is not blocked.
  void set_waiting(int member, std::vector<std::string> names, Clock::time_point now);
  // Divergence: every member is blocked on (or joined and waiting for)
  // tensors that are pending and not ready, and nothing changed for
  // divergence_seconds - e.g. rank 0 in one collective, rank 1 in another,
  // each submitted by one rank only. No member can submit anything else, so
  // nothing would ever complete. Returns the reason, naming what each rank
  // waits on (empty when there is no divergence): the process set must fail,
  // since its ranks are out of step and only a reset (shutdown and init)
  // brings them together again.
  std::string inspect_divergence(Clock::time_point now) const;
  // Warns about tensors some ranks submitted long ago and others did not.
  // Returns a non-empty reason when HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is
  // exceeded: the process set must then fail.
  std::string inspect_stalls(Clock::time_point now);
  uint64_t cache_hits() const { return cache_.hits(); }
  // HOROVOD_AUTOTUNE: the knobs it tunes, applied from the next response on.
  void retune(int64_t fusion_threshold_bytes, double cycle_time_seconds, bool cache_enabled);

 private:
  struct Pending {
    std::vector<RequestMeta> metas;
    std::vector<char> have;
    int count = 0;
    bool complete = false;
    Clock::time_point first_seen;
    Clock::time_point last_warning;
  };

  int size() const { return static_cast<int>(config_.global_ranks.size()); }
  void check_complete(const std::string& name, Pending& p);  // p: pending_'s entry for name
  Response build_response(const std::string& name, Pending& pending);
  void reduce_inline(const Pending& pending, Response* response) const;
  // Empty when the requests agree; else the reason, with the global ranks at
  // fault in *at_fault (see hvd_error_get_ranks).
  std::string validate(const std::string& name, const Pending& pending, std::vector<int>* at_fault) const;
  std::vector<Response> fuse(std::vector<Response> singles) const;
  std::string rank_list(const std::vector<int>& members) const;

  CoordinatorConfig config_;
  Timeline* timeline_;
  ResponseCache cache_;
  std::unordered_map<std::string, Pending> pending_;
  std::vector<std::string> arrival_order_;  // first-seen order; may hold finished names
  std::vector<std::string> ready_;
  Clock::time_point ready_since_;
  std::unordered_map<std::string, std::vector<std::string>> group_ready_;
  std::vector<char> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
  std::vector<int> left_;  // members that shut down
  std::vector<std::vector<std::string>> waiting_;  // by member: blocked-on names, sorted
  Clock::time_point last_change_ = Clock::now();
  uint64_t last_lane_key_ = 0;  // last request, response or change of waiting_
};

}  // namespace hvd
