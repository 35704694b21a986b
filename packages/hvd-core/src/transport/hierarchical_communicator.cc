// hierarchical_communicator.cc - allreduce as local reduce-scatter (shm),
// cross-host allreduce of this member's shard (tcp), local allgather (shm),
// so each byte crosses the network once per host instead of once per member;
// large ones pipelined in chunks so the local stages hide behind the network.
#include "transport/hierarchical_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

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
  host_members_ = host_members;
  my_local_ = my_local;
  staged_allreduce_ = options.hierarchical;
  staged_allgather_ = options.hierarchical_allgather;
}

std::string HierarchicalCommunicator::transport_name_for(const std::string& activity) const {
  const bool staged = (activity == "ALLREDUCE" && staged_allreduce_) || (activity == "ALLGATHER" && staged_allgather_);
  return staged ? transport_name() : flat_->transport_name();
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
  guarded([&] {
    if (staged_allreduce_) {
      allreduce_in_stages(data, data, count, dtype, op);
    } else {
      flat_->allreduce(data, count, dtype, op);
    }
  });
}

bool HierarchicalCommunicator::allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype,
                                                      ReduceOp op) {
  if (!staged_allreduce_) return false;  // flat TCP reduces in place
  guarded([&] { allreduce_in_stages(in, out, count, dtype, op); });
  return true;
}

namespace {

// Large allreduces are cut into chunks and pipelined: while chunk k crosses
// the network (where the link, not the CPU, sets the pace), the members
// reduce chunk k+1 and gather chunk k-1 through shared memory. Unpipelined,
// the two local stages added half the network time again (2 hosts x 2
// ranks, 64 MiB: 30 + 125 + 28 ms).
constexpr size_t kPipelineMinBytes = size_t{8} << 20;
constexpr size_t kPipelineChunkBytes = size_t{4} << 20;
constexpr size_t kMaxPipelineChunks = 16;

// Element ranges [begin, end) of the chunks of `count` elements.
std::vector<size_t> chunk_bounds(size_t count, size_t esize, int local_size) {
  const size_t bytes = count * esize;
  size_t chunks = 1;
  if (local_size > 1 && bytes >= kPipelineMinBytes) {
    chunks = std::min(kMaxPipelineChunks, bytes / kPipelineChunkBytes);
  }
  std::vector<size_t> bounds(chunks + 1);
  for (size_t c = 0; c <= chunks; ++c) bounds[c] = count / chunks * c + std::min(c, count % chunks);
  return bounds;
}

// How `count` elements split into the local members' shards.
std::vector<size_t> shard_counts(size_t count, int local_size) {
  std::vector<size_t> shards(static_cast<size_t>(local_size), count / static_cast<size_t>(local_size));
  for (size_t i = 0; i < count % static_cast<size_t>(local_size); ++i) shards[i] += 1;
  return shards;
}

}  // namespace

void HierarchicalCommunicator::allreduce_in_stages(const void* in, void* out, size_t count, DataType dtype,
                                                   ReduceOp op) {
  if (count == 0) return;
  const size_t esize = dtype_size(dtype);
  const int local_size = local_->size();
  const int me = local_->rank();
  const unsigned char* input = static_cast<const unsigned char*>(in);
  unsigned char* bytes = static_cast<unsigned char*>(out);
  const std::vector<size_t> bounds = chunk_bounds(count, esize, local_size);
  const size_t chunks = bounds.size() - 1;
  // This member's shard of each chunk, one after another in shard_.
  std::vector<std::vector<size_t>> shards(chunks);
  std::vector<size_t> shard_offset(chunks + 1, 0);
  for (size_t c = 0; c < chunks; ++c) {
    shards[c] = shard_counts(bounds[c + 1] - bounds[c], local_size);
    shard_offset[c + 1] = shard_offset[c] + shards[c][static_cast<size_t>(me)] * esize;
  }
  if (shard_.size() < shard_offset[chunks]) shard_.resize(shard_offset[chunks]);
  auto reduce_locally = [&](size_t c) {
    local_->reducescatter(input + bounds[c] * esize, shard_.data() + shard_offset[c], shards[c], dtype, op);
  };
  auto cross_hosts = [&](size_t c) {
    cross_->allreduce(shard_.data() + shard_offset[c], shards[c][static_cast<size_t>(me)], dtype, op);
  };
  auto gather_locally = [&](size_t c) {
    std::vector<size_t> shard_bytes(shards[c]);
    for (auto& b : shard_bytes) b *= esize;
    local_->allgatherv(shard_.data() + shard_offset[c], bytes + bounds[c] * esize, shard_bytes);
  };
  if (chunks == 1) {
    reduce_locally(0);
    cross_hosts(0);
    gather_locally(0);
    return;
  }

  // The network stage runs on its own thread, one chunk behind the local
  // reduction; this thread does every shared-memory step, in the same order
  // on every member: reduce 0, then per chunk k >= 1 reduce k, gather k-1.
  struct Progress {
    std::mutex mu;
    std::condition_variable cv;
    size_t reduced = 0;  // chunks whose local reduction is done
    size_t crossed = 0;  // chunks whose network stage is done
    bool stop = false;
    std::exception_ptr failure;  // the network stage's
  } progress;
  std::thread network([&] {
    for (size_t c = 0; c < chunks; ++c) {
      {
        std::unique_lock<std::mutex> lock(progress.mu);
        progress.cv.wait(lock, [&] { return progress.reduced > c || progress.stop; });
        if (progress.stop) return;
      }
      try {
        cross_hosts(c);
      } catch (const Error& e) {
        {
          std::lock_guard<std::mutex> lock(progress.mu);
          progress.failure = std::current_exception();
        }
        progress.cv.notify_all();
        local_->abort(e.what());  // the other thread may be blocked in a shared-memory step
        return;
      }
      {
        std::lock_guard<std::mutex> lock(progress.mu);
        progress.crossed = c + 1;
      }
      progress.cv.notify_all();
    }
  });
  auto mark_reduced = [&](size_t c) {
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      progress.reduced = c + 1;
    }
    progress.cv.notify_all();
  };
  auto wait_crossed = [&](size_t c) {
    std::unique_lock<std::mutex> lock(progress.mu);
    progress.cv.wait(lock, [&] { return progress.crossed > c || progress.failure; });
    if (progress.failure) std::rethrow_exception(progress.failure);
  };
  try {
    reduce_locally(0);
    mark_reduced(0);
    for (size_t c = 1; c < chunks; ++c) {
      reduce_locally(c);
      mark_reduced(c);
      wait_crossed(c - 1);
      gather_locally(c - 1);
    }
    wait_crossed(chunks - 1);
    gather_locally(chunks - 1);
  } catch (const Error& e) {
    std::exception_ptr first;
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      progress.stop = true;
      first = progress.failure;
    }
    progress.cv.notify_all();
    cross_->abort(e.what());  // ends a network step in flight
    network.join();
    // The network stage's own error, not the abort it caused here.
    if (first) std::rethrow_exception(first);
    throw;
  }
  network.join();
}

void HierarchicalCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  guarded([&] {
    if (staged_allgather_) {
      allgather_in_stages(in, out, bytes_per_rank);
    } else {
      flat_->allgatherv(in, out, bytes_per_rank);
    }
  });
}

// Across hosts first, so each block crosses the network once per host
// rather than once per member: the members with this local index gather
// their blocks over TCP, then every member on the host shares what it
// gathered through shared memory, and the blocks are put in member order.
void HierarchicalCommunicator::allgather_in_stages(const void* in, void* out,
                                                   const std::vector<size_t>& bytes_per_rank) {
  if (static_cast<int>(bytes_per_rank.size()) != size_) {
    throw_error(ErrorCode::kInternal, "hierarchical allgatherv: bytes_per_rank has " +
                                          std::to_string(bytes_per_rank.size()) + " entries for " +
                                          std::to_string(size_) + " members");
  }
  const size_t hosts = host_members_.size();
  const size_t local_size = host_members_[0].size();
  std::vector<size_t> cross_bytes(hosts), local_bytes(local_size, 0);
  for (size_t h = 0; h < hosts; ++h) {
    cross_bytes[h] = bytes_per_rank[static_cast<size_t>(host_members_[h][static_cast<size_t>(my_local_)])];
    for (size_t l = 0; l < local_size; ++l) local_bytes[l] += bytes_per_rank[static_cast<size_t>(host_members_[h][l])];
  }
  size_t total = 0;
  for (size_t b : local_bytes) total += b;
  if (total == 0) return;
  gathered_.resize(std::max<size_t>(1, local_bytes[static_cast<size_t>(my_local_)]));
  by_local_.resize(total);
  cross_->allgatherv(in, gathered_.data(), cross_bytes);
  local_->allgatherv(gathered_.data(), by_local_.data(), local_bytes);
  std::vector<size_t> out_offset(static_cast<size_t>(size_) + 1, 0);
  for (size_t m = 0; m < static_cast<size_t>(size_); ++m) out_offset[m + 1] = out_offset[m] + bytes_per_rank[m];
  unsigned char* output = static_cast<unsigned char*>(out);
  const unsigned char* source = by_local_.data();
  for (size_t l = 0; l < local_size; ++l) {
    for (size_t h = 0; h < hosts; ++h) {
      const size_t m = static_cast<size_t>(host_members_[h][l]);
      if (bytes_per_rank[m] > 0) std::memcpy(output + out_offset[m], source, bytes_per_rank[m]);
      source += bytes_per_rank[m];
    }
  }
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
