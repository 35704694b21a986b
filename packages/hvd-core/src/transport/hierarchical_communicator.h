// hierarchical_communicator.h - several hosts with the same number of
// members each: allreduce and allgather in stages - shared memory inside a
// host, TCP across hosts between members with the same local index; a flat
// TCP mesh for everything else (and for either of the two when turned off).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"

namespace hvd {

class HierarchicalCommunicator : public Communicator {
 public:
  // `host_members[h]` lists the member indices on host h (in member order);
  // every host has the same count.
  HierarchicalCommunicator(const CommOptions& options, const std::vector<std::vector<int>>& host_members,
                           Store& store, ConnectionManager& connections);

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  bool allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  void barrier() override;
  void abort(const std::string& reason) override;
  std::string transport_name() const override { return "hierarchical(shm+tcp)"; }
  // Staged allreduces and allgathers are "hierarchical"; the rest run on the flat mesh ("tcp").
  std::string transport_name_for(const std::string& activity) const override;
  // Whether allreduce and allgather run in stages from the next call on
  // (HOROVOD_HIERARCHICAL_ALLREDUCE/ALLGATHER, or what autotune tries): the
  // coordinator decides, every member applies it before the same response.
  void set_staging(bool allreduce, bool allgather) {
    staged_allreduce_ = allreduce;
    staged_allgather_ = allgather;
  }
  // The host stage's (shared memory's) chunk.
  size_t pipeline_chunk_default() const override { return local_->pipeline_chunk_default(); }
  void set_pipeline_chunk_bytes(size_t bytes) override { local_->set_pipeline_chunk_bytes(bytes); }

 private:
  void allreduce_in_stages(const void* in, void* out, size_t count, DataType dtype, ReduceOp op);
  void allgather_in_stages(const void* in, void* out, const std::vector<size_t>& bytes_per_rank);
  // Runs fn; on failure aborts every stage so no member is left waiting.
  template <typename Fn>
  void guarded(Fn&& fn);

  std::unique_ptr<Communicator> local_;  // members on this host (shm)
  std::unique_ptr<Communicator> cross_;  // same local index on every host (tcp)
  std::unique_ptr<Communicator> flat_;   // all members (tcp)
  std::vector<std::vector<int>> host_members_;
  int my_local_ = 0;                 // this member's index on its host
  bool staged_allreduce_ = true;     // CommOptions::hierarchical
  bool staged_allgather_ = true;     // CommOptions::hierarchical_allgather
  std::vector<unsigned char> shard_;     // allreduce: this member's shards
  std::vector<unsigned char> gathered_;  // allgather: the blocks of this local index on every host
  std::vector<unsigned char> by_local_;  // allgather: every block, by local index, then host
};

}  // namespace hvd
