// gpu_communicators.cc - see gpu_communicators.h.
#include "gpu/gpu_communicators.h"

#include <numeric>

#include "common/error.h"
#include "gpu/gpu_plugin_loader.h"

namespace hvd {

NcclCommunicator::NcclCommunicator(const hvd_gpu_plugin* api, hvd_gpu_comm* comm, hvd_gpu_stream* stream, int rank,
                                   int size)
    : api_(api), comm_(comm), stream_(stream) {
  rank_ = rank;
  size_ = size;
}

void NcclCommunicator::check(int32_t rc, const hvd_gpu_status& status, const char* what) {
  if (rc != 0) throw_gpu_status(status, what);
}

void NcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  allreduce_out_of_place(data, data, count, dtype, op);
}

bool NcclCommunicator::allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) {
  hvd_gpu_status status{};
  check(api_->nccl_allreduce(comm_, stream_, in, out, count, static_cast<int32_t>(dtype), static_cast<int32_t>(op),
                             &status),
        status, "NCCL allreduce");
  return true;
}

void NcclCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  hvd_gpu_status status{};
  check(api_->nccl_allgatherv(comm_, stream_, in, out, bytes_per_rank.data(), &status), status, "NCCL allgather");
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  hvd_gpu_status status{};
  check(api_->nccl_broadcast(comm_, stream_, data, bytes, root, &status), status, "NCCL broadcast");
}

void NcclCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                 const std::vector<size_t>& recv_bytes) {
  hvd_gpu_status status{};
  check(api_->nccl_alltoallv(comm_, stream_, in, send_bytes.data(), out, recv_bytes.data(), &status), status,
        "NCCL alltoall");
}

void NcclCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                                     ReduceOp op) {
  hvd_gpu_status status{};
  check(api_->nccl_reducescatterv(comm_, stream_, in, out, counts.data(), static_cast<int32_t>(dtype),
                                  static_cast<int32_t>(op), &status),
        status, "NCCL reducescatter");
}

void NcclCommunicator::barrier() {
  throw_error(ErrorCode::kInternal, "internal error: a barrier reached the NCCL communicator");
}

// ---------------------------------------------------------------------------

HostStagedCommunicator::HostStagedCommunicator(const hvd_gpu_plugin* api, hvd_gpu_stream* stream, Communicator& host)
    : api_(api), stream_(stream), host_(host) {
  rank_ = host.rank();
  size_ = host.size();
}

HostStagedCommunicator::~HostStagedCommunicator() {
  if (buffer_ != nullptr) {
    hvd_gpu_status status{};
    api_->stream_synchronize(stream_, &status);
    api_->host_free(buffer_);
  }
}

unsigned char* HostStagedCommunicator::host_buffer(size_t bytes) {
  if (bytes > capacity_) {
    hvd_gpu_status status{};
    // A queued copy back to the device may still read the old buffer.
    if (api_->stream_synchronize(stream_, &status) != 0) throw_gpu_status(status, "staging through host memory");
    api_->host_free(buffer_);
    buffer_ = nullptr;
    capacity_ = 0;
    size_t rounded = (bytes + (1u << 20) - 1) & ~size_t((1u << 20) - 1);
    buffer_ = api_->host_alloc(rounded, &status);
    if (buffer_ == nullptr) throw_gpu_status(status, "staging through host memory");
    capacity_ = rounded;
  }
  return static_cast<unsigned char*>(buffer_);
}

void HostStagedCommunicator::to_host(void* host, const void* device, size_t bytes) {
  hvd_gpu_status status{};
  if (api_->copy(stream_, host, device, bytes, HVD_GPU_DEVICE_TO_HOST, &status) != 0 ||
      api_->stream_synchronize(stream_, &status) != 0) {
    throw_gpu_status(status, "copying a CUDA tensor to host memory");
  }
}

void HostStagedCommunicator::to_device(void* device, const void* host, size_t bytes) {
  hvd_gpu_status status{};
  if (api_->copy(stream_, device, host, bytes, HVD_GPU_HOST_TO_DEVICE, &status) != 0) {
    throw_gpu_status(status, "copying a result back to the GPU");
  }
}

void HostStagedCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  unsigned char* host = host_buffer(bytes);
  to_host(host, data, bytes);
  host_.allreduce(host, count, dtype, op);
  to_device(data, host, bytes);
}

void HostStagedCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  const size_t mine = bytes_per_rank[static_cast<size_t>(rank_)];
  const size_t total = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), size_t{0});
  unsigned char* host = host_buffer(mine + total);
  to_host(host, in, mine);
  host_.allgatherv(host, host + mine, bytes_per_rank);
  to_device(out, host + mine, total);
}

void HostStagedCommunicator::broadcast(void* data, size_t bytes, int root) {
  unsigned char* host = host_buffer(bytes);
  if (rank_ == root) to_host(host, data, bytes);
  host_.broadcast(host, bytes, root);
  if (rank_ != root) to_device(data, host, bytes);
}

void HostStagedCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                       const std::vector<size_t>& recv_bytes) {
  const size_t sent = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t received = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  unsigned char* host = host_buffer(sent + received);
  to_host(host, in, sent);
  host_.alltoallv(host, send_bytes, host + sent, recv_bytes);
  to_device(out, host + sent, received);
}

void HostStagedCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                           DataType dtype, ReduceOp op) {
  const size_t esize = dtype_size(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0}) * esize;
  const size_t mine = counts[static_cast<size_t>(rank_)] * esize;
  unsigned char* host = host_buffer(total + mine);
  to_host(host, in, total);
  host_.reducescatter(host, host + total, counts, dtype, op);
  to_device(out, host + total, mine);
}

// ---------------------------------------------------------------------------

HierarchicalNcclCommunicator::HierarchicalNcclCommunicator(const hvd_gpu_plugin* api, hvd_gpu_comm* local,
                                                           hvd_gpu_stream* stream, HostStagedCommunicator* cross,
                                                           Communicator& flat)
    : api_(api), local_(local), stream_(stream), cross_(cross), flat_(flat) {
  rank_ = flat.rank();
  size_ = flat.size();
}

void HierarchicalNcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  hvd_gpu_status status{};
  if (api_->nccl_reduce(local_, stream_, data, data, count, static_cast<int32_t>(dtype), static_cast<int32_t>(op), 0,
                        &status) != 0) {
    throw_gpu_status(status, "NCCL reduce within the host (hierarchical allreduce)");
  }
  // The host's root: across hosts through host memory (waits for the reduce).
  if (cross_ != nullptr) cross_->allreduce(data, count, dtype, op);
  if (api_->nccl_broadcast(local_, stream_, data, count * dtype_size(dtype), 0, &status) != 0) {
    throw_gpu_status(status, "NCCL broadcast within the host (hierarchical allreduce)");
  }
}

}  // namespace hvd
