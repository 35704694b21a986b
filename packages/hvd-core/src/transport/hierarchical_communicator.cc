// hierarchical_communicator.cc - allreduce as local reduce-scatter (shm),
// cross-host allreduce of this member's shard (tcp), local allgather (shm),
// so each byte crosses the network once per host instead of once per member.
#include "transport/hierarchical_communicator.h"

#include <algorithm>

#include "common/error.h"
#include "transport/shm/shm_communicator.h"
#include "transport/tcp/tcp_communicator.h"

namespace hvd {

HierarchicalCommunicator::HierarchicalCommunicator(const CommOptions& options,
                                                   const std::vector<std::vector<int>>& host_members,
                                                   Store& store, ConnectionManager& connections) {
  rank_ = options.rank;
  size_ = static_cast<int>(options.global_ranks.size());
  int my_host = -1, my_local = -1;
  for (size_t h = 0; h < host_members.size(); ++h) {
    auto it = std::find(host_members[h].begin(), host_members[h].end(), rank_);
    if (it != host_members[h].end()) {
      my_host = static_cast<int>(h);
      my_local = static_cast<int>(it - host_members[h].begin());
    }
  }
  if (my_host < 0) {
    throw_error(ErrorCode::kInternal, "hierarchical communicator: member " + std::to_string(rank_) +
                                          " is on no host");
  }
  CommOptions local = options;
  local.key = options.key + "/local" + std::to_string(my_host);
  local.rank = my_local;
  local.global_ranks.clear();
  local.hosts.clear();
  for (int m : host_members[my_host]) {
    local.global_ranks.push_back(options.global_ranks[m]);
    local.hosts.push_back(options.hosts[m]);
  }
  CommOptions cross = options;
  cross.key = options.key + "/cross" + std::to_string(my_local);
  cross.rank = my_host;
  cross.global_ranks.clear();
  cross.hosts.clear();
  for (const auto& members : host_members) {
    cross.global_ranks.push_back(options.global_ranks[members[my_local]]);
    cross.hosts.push_back(options.hosts[members[my_local]]);
  }
  CommOptions flat = options;
  flat.key = options.key + "/flat";
  local_ = std::make_unique<ShmCommunicator>(local, store);
  cross_ = std::make_unique<TcpCommunicator>(cross, connections);
  flat_ = std::make_unique<TcpCommunicator>(flat, connections);
}

template <typename Fn>
void HierarchicalCommunicator::guarded(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    abort(e.what());
    throw;
  }
}

void HierarchicalCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  try {
    allreduce_in_stages(data, count, dtype, op);
  } catch (const Error& e) {
    // A failure in one stage must reach the members waiting in the others.
    abort(e.what());
    throw;
  }
}

void HierarchicalCommunicator::allreduce_in_stages(void* data, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  const size_t esize = dtype_size(dtype);
  const int local_size = local_->size();
  std::vector<size_t> shards(local_size, count / local_size);
  for (size_t i = 0; i < count % local_size; ++i) shards[i] += 1;
  size_t mine = shards[local_->rank()];
  if (shard_.size() < mine * esize) shard_.resize(mine * esize);
  local_->reducescatter(data, shard_.data(), shards, dtype, op);
  cross_->allreduce(shard_.data(), mine, dtype, op);
  std::vector<size_t> shard_bytes(local_size);
  for (int m = 0; m < local_size; ++m) shard_bytes[m] = shards[m] * esize;
  local_->allgatherv(shard_.data(), data, shard_bytes);
}

void HierarchicalCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  guarded([&] { flat_->allgatherv(in, out, bytes_per_rank); });
}

void HierarchicalCommunicator::broadcast(void* data, size_t bytes, int root) { guarded([&] { flat_->broadcast(data, bytes, root); }); }

void HierarchicalCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                         const std::vector<size_t>& recv_bytes) {
  guarded([&] { flat_->alltoallv(in, send_bytes, out, recv_bytes); });
}

void HierarchicalCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                             DataType dtype, ReduceOp op) {
  guarded([&] { flat_->reducescatter(in, out, counts, dtype, op); });
}

void HierarchicalCommunicator::barrier() { guarded([&] { flat_->barrier(); }); }

void HierarchicalCommunicator::abort(const std::string& reason) {
  local_->abort(reason);
  cross_->abort(reason);
  flat_->abort(reason);
}

}  // namespace hvd
