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

void NcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  allreduce_out_of_place(data, data, count, dtype, op);
}

bool NcclCommunicator::allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) {
  gpu_call("NCCL allreduce", api_->nccl_allreduce, comm_, stream_, in, out, count, static_cast<int32_t>(dtype),
           static_cast<int32_t>(op));
  return true;
}

void NcclCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  gpu_call("NCCL allgather", api_->nccl_allgatherv, comm_, stream_, in, out, bytes_per_rank.data());
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  gpu_call("NCCL broadcast", api_->nccl_broadcast, comm_, stream_, data, bytes, root);
}

void NcclCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                 const std::vector<size_t>& recv_bytes) {
  gpu_call("NCCL alltoall", api_->nccl_alltoallv, comm_, stream_, in, send_bytes.data(), out, recv_bytes.data());
}

void NcclCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                                     ReduceOp op) {
  gpu_call("NCCL reducescatter", api_->nccl_reducescatterv, comm_, stream_, in, out, counts.data(),
           static_cast<int32_t>(dtype), static_cast<int32_t>(op));
}

void NcclCommunicator::barrier() {
  throw_error(ErrorCode::kInternal, "internal error: a barrier reached the NCCL communicator");
}

// ---------------------------------------------------------------------------

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ != nullptr) {
    hvd_gpu_status status{};
    api_->stream_synchronize(stream_, &status);
    api_->host_free(data_);
  }
}

unsigned char* PinnedHostBuffer::get(size_t bytes) {
  if (device_copy_queued_ || bytes > capacity_) {
    gpu_call("staging through host memory", api_->stream_synchronize, stream_);
    device_copy_queued_ = false;
  }
  if (bytes > capacity_) {
    api_->host_free(data_);
    capacity_ = 0;
    hvd_gpu_status status{};
    data_ = api_->host_alloc(round_up_to_mib(bytes), &status);
    if (data_ == nullptr) throw_gpu_status(status, "staging through host memory");
    capacity_ = round_up_to_mib(bytes);
  }
  return static_cast<unsigned char*>(data_);
}

void PinnedHostBuffer::copy_to_device(void* device, const void* host, size_t bytes, const char* what) {
  gpu_call(what, api_->copy, stream_, device, host, bytes, static_cast<int32_t>(HVD_GPU_HOST_TO_DEVICE));
  device_copy_queued_ = true;
}

// ---------------------------------------------------------------------------

HostStagedCommunicator::HostStagedCommunicator(const hvd_gpu_plugin* api, hvd_gpu_stream* stream, Communicator& host)
    : api_(api), stream_(stream), host_(host), buffer_(api, stream) {
  rank_ = host.rank();
  size_ = host.size();
}

void HostStagedCommunicator::to_host(void* host, const void* device, size_t bytes) {
  gpu_call("copying a CUDA tensor to host memory", api_->copy, stream_, host, device, bytes,
           static_cast<int32_t>(HVD_GPU_DEVICE_TO_HOST));
  gpu_call("copying a CUDA tensor to host memory", api_->stream_synchronize, stream_);
}

void HostStagedCommunicator::to_device(void* device, const void* host, size_t bytes) {
  buffer_.copy_to_device(device, host, bytes, "copying a result back to the GPU");
}

void HostStagedCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  unsigned char* host = buffer_.get(bytes);
  to_host(host, data, bytes);
  host_.allreduce(host, count, dtype, op);
  to_device(data, host, bytes);
}

void HostStagedCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  const size_t mine = bytes_per_rank[static_cast<size_t>(rank_)];
  const size_t total = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), size_t{0});
  unsigned char* host = buffer_.get(mine + total);
  to_host(host, in, mine);
  host_.allgatherv(host, host + mine, bytes_per_rank);
  to_device(out, host + mine, total);
}

void HostStagedCommunicator::broadcast(void* data, size_t bytes, int root) {
  unsigned char* host = buffer_.get(bytes);
  if (rank_ == root) to_host(host, data, bytes);
  host_.broadcast(host, bytes, root);
  if (rank_ != root) to_device(data, host, bytes);
}

void HostStagedCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                       const std::vector<size_t>& recv_bytes) {
  const size_t sent = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t received = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  unsigned char* host = buffer_.get(sent + received);
  to_host(host, in, sent);
  host_.alltoallv(host, send_bytes, host + sent, recv_bytes);
  to_device(out, host + sent, received);
}

void HostStagedCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                           DataType dtype, ReduceOp op) {
  const size_t esize = dtype_size(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0}) * esize;
  const size_t mine = counts[static_cast<size_t>(rank_)] * esize;
  unsigned char* host = buffer_.get(total + mine);
  to_host(host, in, total);
  host_.reducescatter(host, host + total, counts, dtype, op);
  to_device(out, host + total, mine);
}

// ---------------------------------------------------------------------------

HierarchicalNcclCommunicator::HierarchicalNcclCommunicator(const hvd_gpu_plugin* api, hvd_gpu_comm* local,
                                                           hvd_gpu_stream* stream, Communicator* cross,
                                                           Communicator& flat)
    : api_(api), local_(local), stream_(stream), cross_(cross), flat_(flat) {
  rank_ = flat.rank();
  size_ = flat.size();
}

void HierarchicalNcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  gpu_call("NCCL reduce within the host (hierarchical allreduce)", api_->nccl_reduce, local_, stream_,
           static_cast<const void*>(data), data, count, static_cast<int32_t>(dtype), static_cast<int32_t>(op), 0);
  // The host's root: across hosts through host memory (waits for the reduce).
  if (cross_ != nullptr) cross_->allreduce(data, count, dtype, op);
  gpu_call("NCCL broadcast within the host (hierarchical allreduce)", api_->nccl_broadcast, local_, stream_, data,
           count * dtype_size(dtype), 0);
}

}  // namespace hvd
