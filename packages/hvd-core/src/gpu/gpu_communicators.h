// gpu_communicators.h - how CUDA tensors move between the members of a
// process set, behind the Communicator interface (on device pointers) so
// the executor's algorithms serve GPU tensors unchanged:
//
//   NcclCommunicator        NCCL collectives queued on hvd's stream; calls
//                           return at once, the work completes in stream order
//   HostStagedCommunicator  copies to page-locked host memory, runs the set's
//                           CPU communicator (shm, TCP, MPI), copies back:
//                           for dtypes NCCL cannot reduce, for ranks that
//                           share a GPU, without NCCL, and where
//                           HOROVOD_GPU_<OP>=MPI/GLOO asks for it
//   HierarchicalNcclCommunicator  HOROVOD_HIERARCHICAL_ALLREDUCE=1 across
//                           hosts: allreduce as an NCCL reduce to each host's
//                           first member, an allreduce of those members over
//                           the CPU transports (TCP or MPI), and an NCCL
//                           broadcast within each host
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_plugin.h"
#include "transport/communicator.h"

namespace hvd {

// Page-locked host memory for staging, grown on demand (in whole MiB). The
// stream is synchronized before the host writes into the buffer again after
// a copy to the device was queued from it, and before a buffer is replaced:
// a queued copy may still read it. (A broadcast's receivers write into it
// with no copy from the device first, which would wait for the stream.)
class PinnedHostBuffer {
 public:
  PinnedHostBuffer(const hvd_gpu_plugin* api, hvd_gpu_stream* stream) : api_(api), stream_(stream) {}
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  // The buffer, at least `bytes` long and free to write: a copy to the
  // device queued from it earlier has run (the host would otherwise
  // overwrite what that copy still has to read).
  unsigned char* get(size_t bytes);
  // Queues a copy of `bytes` at `host` (inside the buffer) to `device` on
  // the stream; the host does not wait for it.
  void copy_to_device(void* device, const void* host, size_t bytes, const char* what);

 private:
  const hvd_gpu_plugin* api_;
  hvd_gpu_stream* stream_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  bool device_copy_queued_ = false;
};

// `bytes` rounded up to whole MiB: buffers that grow do so rarely.
inline size_t round_up_to_mib(size_t bytes) {
  constexpr size_t kMiB = size_t(1) << 20;
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

class NcclCommunicator : public Communicator {
 public:
  // Borrows `comm` and `stream` (owned by the GpuDataPlane).
  NcclCommunicator(const hvd_gpu_plugin* api, hvd_gpu_comm* comm, hvd_gpu_stream* stream, int rank, int size);
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  bool allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  // Barriers carry no tensor: the executor runs them on the CPU communicator.
  void barrier() override;
  // NCCL is aborted by the GpuDataPlane, on the thread that queues its work.
  void abort(const std::string&) override {}
  std::string transport_name() const override { return "nccl"; }

 private:
  const hvd_gpu_plugin* api_;
  hvd_gpu_comm* comm_;
  hvd_gpu_stream* stream_;
};

class HostStagedCommunicator : public Communicator {
 public:
  HostStagedCommunicator(const hvd_gpu_plugin* api, hvd_gpu_stream* stream, Communicator& host);
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  void barrier() override { host_.barrier(); }
  void abort(const std::string& reason) override { host_.abort(reason); }
  std::string transport_name() const override { return "staged(" + host_.transport_name() + ")"; }

 private:
  // The host is done with the buffer once to_host() has returned again: it
  // waits for the stream, so earlier copies back to the device have run.
  void to_host(void* host, const void* device, size_t bytes);  // waits
  void to_device(void* device, const void* host, size_t bytes);  // queued
  const hvd_gpu_plugin* api_;
  hvd_gpu_stream* stream_;
  Communicator& host_;
  PinnedHostBuffer buffer_;
};

class HierarchicalNcclCommunicator : public Communicator {
 public:
  // `local` spans this host's members (the first is its root); `cross` (the
  // hosts' roots, staged through host memory) is null except on the root.
  // Everything but allreduce goes to `flat`, the set's NCCL communicator.
  HierarchicalNcclCommunicator(const hvd_gpu_plugin* api, hvd_gpu_comm* local, hvd_gpu_stream* stream,
                               Communicator* cross, Communicator& flat);
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    flat_.allgatherv(in, out, bytes_per_rank);
  }
  void broadcast(void* data, size_t bytes, int root) override { flat_.broadcast(data, bytes, root); }
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    flat_.alltoallv(in, send_bytes, out, recv_bytes);
  }
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override {
    flat_.reducescatter(in, out, counts, dtype, op);
  }
  void barrier() override { flat_.barrier(); }
  void abort(const std::string&) override {}
  std::string transport_name() const override { return "hierarchical(nccl+cpu)"; }

 private:
  const hvd_gpu_plugin* api_;
  hvd_gpu_comm* local_;
  hvd_gpu_stream* stream_;
  Communicator* cross_;
  Communicator& flat_;
};

}  // namespace hvd
