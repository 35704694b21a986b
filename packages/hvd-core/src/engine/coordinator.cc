// coordinator.cc - see coordinator.h.
#include "engine/coordinator.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/logging.h"
#include "engine/timeline.h"
#include "reduce/reduce.h"

namespace hvd {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string op_string(int32_t op) {
  switch (op) {
    case HVD_OP_AVERAGE: return "Average";
    case HVD_OP_SUM: return "Sum";
    case HVD_OP_ADASUM: return "Adasum";
    case HVD_OP_MIN: return "Min";
    case HVD_OP_MAX: return "Max";
    case HVD_OP_PRODUCT: return "Product";
  }
  return "op" + std::to_string(op);
}

std::string double_string(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

Coordinator::Coordinator(CoordinatorConfig config, Timeline* timeline)
    : config_(std::move(config)), timeline_(timeline), cache_(config_.cache_capacity) {
  joined_.assign(config_.global_ranks.size(), 0);
  waiting_.resize(config_.global_ranks.size());
}

std::string Coordinator::rank_list(const std::vector<int>& members) const {
  std::ostringstream out;
  for (size_t i = 0; i < members.size(); ++i) {
    out << (i ? ", " : "") << config_.global_ranks[static_cast<size_t>(members[i])];
  }
  return out.str();
}

void Coordinator::add_request(int member, RequestMeta meta, Clock::time_point now) {
  last_change_ = now;
  if (meta.collective == Collective::kJoin) {
    if (!joined_[static_cast<size_t>(member)]) {
      joined_[static_cast<size_t>(member)] = 1;
      ++joined_count_;
    }
    last_joined_ = member;
    // Joined members no longer hold anything up.
    for (const auto& name : arrival_order_) {
      auto it = pending_.find(name);
      if (it != pending_.end() && !it->second.complete) check_complete(it->first, it->second);
    }
    return;
  }
  auto it = pending_.find(meta.name);
  if (it == pending_.end()) {
    Pending p;
    p.metas.resize(static_cast<size_t>(size()));
    p.have.assign(static_cast<size_t>(size()), 0);
    p.first_seen = now;
    p.last_warning = now;
    it = pending_.emplace(meta.name, std::move(p)).first;
    arrival_order_.push_back(meta.name);
    if (timeline_ != nullptr && timeline_->active()) {
      timeline_->negotiate_start(meta.name, collective_upper_name(meta.collective));
    }
  }
  Pending& p = it->second;
  if (p.have[static_cast<size_t>(member)]) return;  // enqueue rejects duplicates; be defensive
  p.have[static_cast<size_t>(member)] = 1;
  ++p.count;
  if (timeline_ != nullptr) timeline_->negotiate_rank_ready(meta.name, config_.global_ranks[static_cast<size_t>(member)]);
  const std::string& name = it->first;
  p.metas[static_cast<size_t>(member)] = std::move(meta);
  check_complete(name, p);
}

void Coordinator::check_complete(const std::string& name, Pending& p) {
  if (p.complete) return;
  // Counting first: scanning every member on every arrival made a step cost
  // P x P per tensor.
  if (p.count + joined_count_ < size()) return;
  for (int m = 0; m < size(); ++m) {
    if (!p.have[static_cast<size_t>(m)] && !joined_[static_cast<size_t>(m)]) return;
  }
  p.complete = true;
  if (timeline_ != nullptr) timeline_->negotiate_end(name);
  if (ready_.empty()) ready_since_ = Clock::now();
  // Any member's request tells the group: validation checks they agree.
  const RequestMeta* meta = nullptr;
  for (int m = 0; m < size() && meta == nullptr; ++m) {
    if (p.have[static_cast<size_t>(m)]) meta = &p.metas[static_cast<size_t>(m)];
  }
  if (meta->group_key.empty() || meta->group_size <= 1) {
    ready_.push_back(name);
    return;
  }
  auto& group = group_ready_[meta->group_key];
  group.push_back(name);
  if (static_cast<int32_t>(group.size()) >= meta->group_size) {
    for (auto& n : group) ready_.push_back(n);
    group_ready_.erase(meta->group_key);
  }
}

void Coordinator::set_waiting(int member, std::vector<std::string> names, Clock::time_point now) {
  std::sort(names.begin(), names.end());
  auto& current = waiting_[static_cast<size_t>(member)];
  if (names == current) return;
  current = std::move(names);
  last_change_ = now;
}

std::string Coordinator::inspect_divergence(Clock::time_point now) const {
  if (config_.divergence_seconds <= 0 || pending_.empty() || !ready_.empty() ||
      std::chrono::duration<double>(now - last_change_).count() < config_.divergence_seconds) {
    return "";
  }
  for (int m = 0; m < size(); ++m) {
    if (joined_[static_cast<size_t>(m)]) continue;
    const auto& names = waiting_[static_cast<size_t>(m)];
    if (names.empty()) return "";  // this member may still submit something
    for (const auto& name : names) {
      auto it = pending_.find(name);
      if (it == pending_.end() || it->second.complete) return "";  // on its way to completion
    }
  }
  std::ostringstream why;
  why << "Collectives diverged in process set " << config_.process_set_id
      << ": every rank is blocked on an operation the other ranks have not submitted, so none can complete (";
  for (int m = 0; m < size(); ++m) {
    why << (m ? "; " : "") << "rank " << config_.global_ranks[static_cast<size_t>(m)];
    if (joined_[static_cast<size_t>(m)]) {
      why << " has joined";
      continue;
    }
    const auto& names = waiting_[static_cast<size_t>(m)];
    const Pending& p = pending_.at(names[0]);
    std::vector<int> submitted;
    for (int k = 0; k < size(); ++k) {
      if (p.have[static_cast<size_t>(k)]) submitted.push_back(k);
    }
    why << " waits on " << collective_name(p.metas[static_cast<size_t>(submitted[0])].collective) << " '"
        << names[0] << "' (submitted by " << (submitted.size() > 1 ? "ranks " : "rank ") << rank_list(submitted)
        << " only)";
    if (names.size() > 1) why << " and " << names.size() - 1 << " more";
  }
  why << "). A rank skipped a collective - it raised an exception and moved on, or took another branch - or the "
         "ranks run different code: every rank must submit the same collectives. The ranks are out of step: "
         "call hvd.init() (or hvd.shutdown() and hvd.init()) on every rank to start again together.";
  return why.str();
}

void Coordinator::member_left(int member) {
  if (std::find(left_.begin(), left_.end(), member) == left_.end()) left_.push_back(member);
}

std::string Coordinator::departure() const {
  if (left_.empty()) return "";
  return "rank " + rank_list(left_) + " has shut down (hvd.shutdown() was called or the process is exiting); " +
         "collectives in process set " + std::to_string(config_.process_set_id) + " can no longer complete";
}

std::vector<int> Coordinator::left_ranks() const {
  std::vector<int> ranks;
  for (int m : left_) ranks.push_back(config_.global_ranks[static_cast<size_t>(m)]);
  return ranks;
}

bool Coordinator::idle() const { return pending_.empty() && joined_count_ == 0; }

std::string Coordinator::validate(const std::string& name, const Pending& p, std::vector<int>* at_fault) const {
  // Group members by the value of one field; a mismatch names every rank.
  auto check = [&](const char* what, auto value_of) -> std::string {
    std::map<std::string, std::vector<int>> by_value;
    std::vector<std::string> order;
    for (int m = 0; m < size(); ++m) {
      if (!p.have[static_cast<size_t>(m)]) continue;
      std::string v = value_of(p.metas[static_cast<size_t>(m)]);
      if (!by_value.count(v)) order.push_back(v);
      by_value[v].push_back(m);
    }
    if (by_value.size() <= 1) return "";
    // At fault: every rank outside the largest group (the first one on ties).
    const std::string* most = &order[0];
    for (const auto& v : order) {
      if (by_value[v].size() > by_value[*most].size()) most = &v;
    }
    for (const auto& v : order) {
      if (&v == most) continue;
      for (int m : by_value[v]) at_fault->push_back(config_.global_ranks[static_cast<size_t>(m)]);
    }
    std::ostringstream out;
    out << "Mismatched " << what << " for tensor '" << name << "': ";
    for (size_t i = 0; i < order.size(); ++i) {
      const auto& members = by_value[order[i]];
      out << (i ? "; " : "") << (members.size() > 1 ? "ranks " : "rank ") << rank_list(members)
          << " requested " << order[i];
    }
    out << ". Every rank must submit the same collective for a tensor name.";
    return out.str();
  };
  // Identical requests (the usual case) agree on every field: only the join
  // rule below can still refuse them. Grouping members by each field's text
  // costs microseconds per member.
  const RequestMeta* first = nullptr;
  bool identical = true;
  for (int m = 0; m < size() && identical; ++m) {
    if (!p.have[static_cast<size_t>(m)]) continue;
    if (first == nullptr) first = &p.metas[static_cast<size_t>(m)];
    identical = p.metas[static_cast<size_t>(m)] == *first;
  }
  const Collective c = first->collective;
  if (!identical) {
    std::string err = check("collective operations", [](const RequestMeta& m) { return std::string(collective_name(m.collective)); });
    if (!err.empty()) return err;
    err = check("data types", [](const RequestMeta& m) { return std::string(dtype_name(m.dtype)); });
    if (!err.empty()) return err;
    err = check("devices", [](const RequestMeta& m) { return std::string("a ") + device_name(m.device) + " tensor"; });
    if (!err.empty()) return err;
    if (c == Collective::kAllgather || c == Collective::kAlltoall) {
      err = check("tensor ranks (number of dimensions)", [](const RequestMeta& m) { return std::to_string(m.shape.size()) + "-dimensional tensors"; });
      if (!err.empty()) return err;
      err = check("tensor shapes beyond the first dimension", [](const RequestMeta& m) {
        return "shape " + shape_string(std::vector<int64_t>(m.shape.begin() + (m.shape.empty() ? 0 : 1), m.shape.end())) + " after the first dimension";
      });
      if (!err.empty()) return err;
    } else if (c != Collective::kBarrier) {
      err = check("tensor shapes", [](const RequestMeta& m) { return "shape " + shape_string(m.shape); });
      if (!err.empty()) return err;
    }
    if (c == Collective::kAllreduce || c == Collective::kReducescatter) {
      err = check("reduction operations", [](const RequestMeta& m) { return "op " + op_string(m.reduce_op); });
      if (!err.empty()) return err;
      err = check("prescale factors", [](const RequestMeta& m) { return "prescale_factor " + double_string(m.prescale); });
      if (!err.empty()) return err;
      err = check("postscale factors", [](const RequestMeta& m) { return "postscale_factor " + double_string(m.postscale); });
      if (!err.empty()) return err;
    }
    if (c == Collective::kBroadcast) {
      // Requests carry the root's position in the set; users think in global ranks.
      err = check("root ranks", [&](const RequestMeta& m) {
        return "root_rank " + std::to_string(config_.global_ranks[static_cast<size_t>(m.root_rank)]);
      });
      if (!err.empty()) return err;
    }
    err = check("groups", [](const RequestMeta& m) {
      return m.group_size > 1 ? "a group of " + std::to_string(m.group_size) + " tensors" : std::string("no group");
    });
    if (!err.empty()) return err;
  }
  std::vector<int> joined_missing;
  for (int m = 0; m < size(); ++m) {
    if (!p.have[static_cast<size_t>(m)]) joined_missing.push_back(m);
  }
  // As in Horovod, a joined rank can only stand in for an allreduce (with zeros).
  if (!joined_missing.empty() && c != Collective::kAllreduce) {
    for (int m : joined_missing) at_fault->push_back(config_.global_ranks[static_cast<size_t>(m)]);
    return std::string(collective_name(c)) + " of tensor '" + name + "' cannot run while rank(s) " +
           rank_list(joined_missing) + " have joined: only allreduce supports join.";
  }
  return "";
}

Response Coordinator::build_response(const std::string& name, Pending& p) {
  std::vector<int> joined_missing;
  const RequestMeta* ref = nullptr;
  for (int m = 0; m < size(); ++m) {
    if (p.have[static_cast<size_t>(m)]) {
      if (ref == nullptr) ref = &p.metas[static_cast<size_t>(m)];
    } else {
      joined_missing.push_back(m);
    }
  }
  // Steady state: the same requests as last time -> reuse the response.
  bool uniform = joined_missing.empty();
  for (int m = 0; m < size() && uniform; ++m) uniform = p.metas[static_cast<size_t>(m)] == *ref;
  if (uniform) {
    if (const Response* cached = cache_.lookup(name, *ref)) return *cached;
  }
  Response r;
  std::vector<int> at_fault;
  std::string err = validate(name, p, &at_fault);
  r.names.push_back(name);
  r.collective = ref->collective;
  if (!err.empty()) {
    r.kind = Response::Kind::kError;
    r.error_message = err;
    r.error_code = HVD_ERROR_PRECONDITION;
    r.error_ranks.assign(at_fault.begin(), at_fault.end());
    return r;
  }
  r.dtype = ref->dtype;
  r.device = ref->device;
  r.reduce_op = ref->reduce_op;
  r.root_rank = ref->root_rank;
  r.prescale = ref->prescale;
  r.postscale = ref->postscale;
  r.shapes.push_back(ref->shape);
  if (r.collective == Collective::kAllgather) {
    std::vector<int64_t> dims(static_cast<size_t>(size()), 0);
    for (int m = 0; m < size(); ++m) {
      if (p.have[static_cast<size_t>(m)]) dims[static_cast<size_t>(m)] = p.metas[static_cast<size_t>(m)].shape.at(0);
    }
    r.first_dims.push_back(std::move(dims));
  } else {
    r.first_dims.emplace_back();
  }
  for (int m : joined_missing) r.joined_ranks.push_back(m);
  if (uniform) {
    // A lane call bypasses the coordinator, so nothing it alone does for a
    // tensor may be lost: the timeline, and the cache's own bookkeeping
    // (a cache that is off means every call is negotiated).
    const int64_t bytes = response_bytes(r);
    const bool timeline = timeline_ != nullptr && timeline_->active();
    const bool lane_collective =
        ((r.collective == Collective::kAllreduce || r.collective == Collective::kReducescatter) &&
         r.reduce_op != HVD_OP_ADASUM) ||
        r.collective == Collective::kBroadcast || r.collective == Collective::kAllgather;
    const bool streams = r.collective == Collective::kBroadcast || r.collective == Collective::kAllgather;
    const size_t limit = streams ? std::max(config_.lane_bytes, config_.lane_stream_bytes) : config_.lane_bytes;
    if (config_.lane_bytes > 0 && cache_.enabled() && !timeline && lane_collective &&
        r.device == Device::kCpu && ref->group_size <= 1 && bytes > 0 && static_cast<size_t>(bytes) <= limit) {
      r.lane_key = ++last_lane_key_;
    }
    cache_.put(name, *ref, r);
  }
  return r;
}

// Every member sent its input with the request (a small host allreduce):
// reduce here, in member order as the shared-memory transport does, and
// send the result with the response.
void Coordinator::reduce_inline(const Pending& p, Response* r) const {
  if (r->kind != Response::Kind::kExecute || r->collective != Collective::kAllreduce || !r->joined_ranks.empty() ||
      r->reduce_op == HVD_OP_ADASUM || r->names.size() != 1) {
    return;
  }
  size_t count = 1;
  for (auto d : r->shapes[0]) count *= static_cast<size_t>(d);
  const size_t bytes = count * dtype_size(r->dtype);
  std::vector<const void*> inputs;
  for (int m = 0; m < size(); ++m) {
    const std::string& data = p.metas[static_cast<size_t>(m)].inline_data;
    if (!p.have[static_cast<size_t>(m)] || data.size() != bytes || bytes == 0) return;
    inputs.push_back(data.data());
  }
  r->inline_result.resize(bytes);
  reduce_many(r->inline_result.data(), inputs.data(), inputs.size(), count, r->dtype, transport_op(r->reduce_op));
}

void Coordinator::retune(int64_t fusion_threshold_bytes, double cycle_time_seconds, bool cache_enabled) {
  config_.fusion_threshold_bytes = fusion_threshold_bytes;
  config_.cycle_time_seconds = cycle_time_seconds;
  cache_.set_enabled(cache_enabled);
}


// Allgather: the bytes everyone gathers, every member's rows.
static int64_t gathered_bytes(const Response& r) {
  int64_t total = 0;
  for (size_t i = 0; i < r.shapes.size(); ++i) {
    int64_t row = static_cast<int64_t>(dtype_size(r.dtype));
    for (size_t d = 1; d < r.shapes[i].size(); ++d) row *= r.shapes[i][d];
    for (int64_t rows : r.first_dims[i]) total += rows * row;
  }
  return total;
}

std::vector<Response> Coordinator::fuse(std::vector<Response> singles) const {
  std::vector<Response> out;
  // The fusion size of out.back(), kept as it grows: summing its tensors
  // again for every candidate made a group of n tensors cost n * n / 2.
  int64_t last_bytes = 0;
  for (auto& s : singles) {
    // Allreduces fuse on any device; allgathers and reducescatters of host
    // tensors (packed and unpacked by the executor around one collective).
    const bool allreduce = s.collective == Collective::kAllreduce;
    const bool gathers = s.collective == Collective::kAllgather;
    const bool host_only = s.device == Device::kCpu &&
                           (gathers || (s.collective == Collective::kReducescatter && s.joined_ranks.empty()));
    const bool fusable = s.kind == Response::Kind::kExecute && s.inline_result.empty() && (allreduce || host_only);
    const int64_t bytes = !fusable ? 0 : gathers ? gathered_bytes(s) : response_bytes(s);
    if (fusable && !out.empty()) {
      Response& last = out.back();
      if (last.kind == Response::Kind::kExecute && last.inline_result.empty() && last.collective == s.collective &&
          last.dtype == s.dtype && last.device == s.device && last.reduce_op == s.reduce_op && last.prescale == s.prescale &&
          last.postscale == s.postscale && last.joined_ranks == s.joined_ranks &&
          last_bytes + bytes <= config_.fusion_threshold_bytes) {
        last.names.push_back(std::move(s.names[0]));
        last.shapes.push_back(std::move(s.shapes[0]));
        last.first_dims.push_back(std::move(s.first_dims[0]));
        last_bytes += bytes;
        continue;
      }
    }
    out.push_back(std::move(s));
    last_bytes = bytes;
  }
  return out;
}

std::vector<Response> Coordinator::take_responses(Clock::time_point now, Clock::time_point* wake_at) {
  std::vector<Response> out;
  bool all_joined = joined_count_ == size();
  if (ready_.empty() && !all_joined) return out;

  if (!ready_.empty() && config_.cycle_time_seconds > 0) {
    // Hold ready allreduces back briefly when more allreduces are already
    // half-submitted, so they fuse. A lone request never waits.
    bool only_allreduce = true;
    int64_t ready_bytes = 0;
    for (const auto& name : ready_) {
      const Pending& p = pending_.at(name);
      for (int m = 0; m < size(); ++m) {
        if (!p.have[static_cast<size_t>(m)]) continue;
        only_allreduce = only_allreduce && p.metas[static_cast<size_t>(m)].collective == Collective::kAllreduce;
        int64_t n = static_cast<int64_t>(dtype_size(p.metas[static_cast<size_t>(m)].dtype));
        for (auto d : p.metas[static_cast<size_t>(m)].shape) n *= d;
        ready_bytes += n;
        break;
      }
    }
    bool more_coming = false;
    for (const auto& [name, p] : pending_) {
      if (p.complete) continue;
      for (int m = 0; m < size() && !more_coming; ++m) {
        more_coming = p.have[static_cast<size_t>(m)] && p.metas[static_cast<size_t>(m)].collective == Collective::kAllreduce;
      }
      if (more_coming) break;
    }
    auto deadline = ready_since_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(config_.cycle_time_seconds));
    if (only_allreduce && more_coming && ready_bytes < config_.fusion_threshold_bytes && now < deadline) {
      *wake_at = deadline;
      return out;
    }
  }

  std::vector<Response> singles;
  singles.reserve(ready_.size());
  for (const auto& name : ready_) {
    auto it = pending_.find(name);
    singles.push_back(build_response(name, it->second));
    reduce_inline(it->second, &singles.back());
    pending_.erase(it);
  }
  ready_.clear();
  if (!pending_.empty() || !group_ready_.empty()) {
    arrival_order_.erase(std::remove_if(arrival_order_.begin(), arrival_order_.end(),
                                        [&](const std::string& n) { return !pending_.count(n); }),
                         arrival_order_.end());
  } else {
    arrival_order_.clear();
  }
  out = fuse(std::move(singles));
  if (all_joined) {
    Response join;
    join.collective = Collective::kJoin;
    join.names.push_back("join");
    join.last_joined_rank = config_.global_ranks[static_cast<size_t>(last_joined_)];
    out.push_back(std::move(join));
    joined_.assign(static_cast<size_t>(size()), 0);
    joined_count_ = 0;
    last_joined_ = -1;
  }
  if (timeline_ != nullptr && !out.empty()) timeline_->mark_cycle();
  if (!out.empty()) last_change_ = now;
  return out;
}

std::string Coordinator::inspect_stalls(Clock::time_point now) {
  if (!config_.stall_check_enabled) return "";
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::ostringstream warning;
  std::string fatal;
  for (const auto& name : arrival_order_) {
    auto it = pending_.find(name);
    if (it == pending_.end() || it->second.complete) continue;
    Pending& p = it->second;
    double waited = secs(now - p.first_seen);
    if (config_.stall_shutdown_seconds > 0 && waited > config_.stall_shutdown_seconds && fatal.empty()) {
      std::vector<int> missing;
      for (int m = 0; m < size(); ++m) {
        if (!p.have[static_cast<size_t>(m)] && !joined_[static_cast<size_t>(m)]) missing.push_back(m);
      }
      fatal = "Stall shutdown: tensor '" + name + "' waited " + std::to_string(static_cast<int>(waited)) +
              " s for rank(s) " + rank_list(missing) + " (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" +
              double_string(config_.stall_shutdown_seconds) + ").";
    }
    if (waited < config_.stall_check_seconds || secs(now - p.last_warning) < config_.stall_check_seconds) continue;
    p.last_warning = now;
    std::vector<int> missing, present;
    for (int m = 0; m < size(); ++m) {
      if (p.have[static_cast<size_t>(m)]) present.push_back(m);
      else if (!joined_[static_cast<size_t>(m)]) missing.push_back(m);
    }
    warning << "\n  '" << name << "': waiting " << static_cast<int>(waited) << " s; missing rank(s) "
            << rank_list(missing) << "; submitted by rank(s) " << rank_list(present);
  }
  std::string w = warning.str();
  if (!w.empty()) {
    HVD_LOG(kWarning, "Stall detected in process set " << config_.process_set_id
                      << ": these tensors were submitted by some ranks but not by others for more than "
                      << config_.stall_check_seconds << " s. Ranks may be submitting different tensors, "
                      << "or only some ranks are submitting, which will deadlock." << w);
  }
  return fatal;
}

}  // namespace hvd
