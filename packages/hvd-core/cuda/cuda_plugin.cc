// cuda_plugin.cc - libhvd_core_cuda.so: the table of src/gpu/gpu_plugin.h
// over the CUDA runtime (linked statically, so the plugin needs only the
// driver) and NCCL (opened at run time, nccl_library.h).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "copy_scaled.h"
#include "gpu/gpu_plugin.h"
#include "hvd/c_api.h"
#include "nccl_library.h"

#define HVD_GPU_EXPORT extern "C" __attribute__((visibility("default")))

struct hvd_gpu_event {
  cudaEvent_t event;
  int device;
};

struct hvd_gpu_stream {
  cudaStream_t stream;
  int device;
};

struct hvd_gpu_comm {
  hvd::cuda::ncclComm_t comm;
  int device;
  int nranks;
  int rank;
};

namespace hvd {
namespace cuda {
namespace {

const NcclLibrary* g_nccl = nullptr;

int32_t fail(hvd_gpu_status* status, int32_t code, const std::string& message) {
  if (status != nullptr) {
    status->code = code;
    std::snprintf(status->message, sizeof(status->message), "%s", message.c_str());
  }
  return -1;
}

bool cuda_ok(cudaError_t err, const char* what, hvd_gpu_status* status) {
  if (err == cudaSuccess) return true;
  cudaGetLastError();  // a non-sticky error must not resurface in a later call
  fail(status, HVD_ERROR_INTERNAL,
       std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  return false;
}

// The engine runs on whichever thread drives it - often the framework's own
// thread - so every call selects its device and puts the thread's previous
// device back afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      err_ = cudaSetDevice(device);
    }
    if (previous_ == device) previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  bool ok(hvd_gpu_status* status) const { return cuda_ok(err_, "cudaSetDevice", status); }

 private:
  int previous_ = -1;
  cudaError_t err_ = cudaSuccess;
};

bool nccl_ok(ncclResult_t result, const char* what, ncclComm_t comm, hvd_gpu_status* status) {
  if (result == ncclSuccess || result == ncclInProgress) return true;
  std::string message = std::string("NCCL error in ") + what + ": " + g_nccl->GetErrorString(result);
  if (g_nccl->GetLastError != nullptr) {
    const char* last = g_nccl->GetLastError(comm);
    if (last != nullptr && *last) message += std::string(" (") + last + ")";
  }
  fail(status, HVD_ERROR_INTERNAL, message);
  return false;
}

bool nccl_type(int32_t dtype, ncclDataType_t* out) {
  switch (dtype) {
    case 0: *out = ncclUint8; return true;
    case 1: *out = ncclInt8; return true;
    case 4: *out = ncclInt32; return true;
    case 5: *out = ncclInt64; return true;
    case 6: *out = ncclFloat16; return true;
    case 7: *out = ncclBfloat16; return true;
    case 8: *out = ncclFloat32; return true;
    case 9: *out = ncclFloat64; return true;
    default: return false;  // uint16, int16, bool: hvd stages those through the host
  }
}

bool nccl_op(int32_t op, ncclRedOp_t* out) {
  switch (op) {
    case 0: *out = ncclSum; return true;
    case 1: *out = ncclMin; return true;
    case 2: *out = ncclMax; return true;
    case 3: *out = ncclProd; return true;
    default: return false;
  }
}

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case 2: case 3: case 6: case 7: return 2;
    case 4: case 8: return 4;
    case 5: case 9: return 8;
    default: return 1;
  }
}

bool need_nccl(hvd_gpu_status* status) {
  if (g_nccl != nullptr) return true;
  fail(status, HVD_ERROR_INTERNAL, "NCCL is not loaded (nccl_open was not called or failed)");
  return false;
}

// ---------------------------------------------------------------------------

int32_t describe(char* out, size_t capacity, hvd_gpu_status* status) {
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return fail(status, HVD_ERROR_UNSUPPORTED,
                std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                    "); CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
                    ", driver " + (driver ? std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10)
                                          : std::string("not found")));
  }
  std::snprintf(out, capacity, "CUDA runtime %d.%d, driver %d.%d, %d device(s)", runtime / 1000,
                runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, count);
  return count;
}

int32_t device_bus_id(int32_t device, char* out, size_t capacity, hvd_gpu_status* status) {
  if (!cuda_ok(cudaDeviceGetPCIBusId(out, static_cast<int>(capacity), device), "cudaDeviceGetPCIBusId", status)) {
    return -1;
  }
  return 0;
}

hvd_gpu_event* event_record(int32_t device, void* framework_stream, hvd_gpu_status* status) {
  DeviceGuard guard(device);
  if (!guard.ok(status)) return nullptr;
  cudaEvent_t event;
  if (!cuda_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", status)) return nullptr;
  if (!cuda_ok(cudaEventRecord(event, static_cast<cudaStream_t>(framework_stream)), "cudaEventRecord", status)) {
    cudaEventDestroy(event);
    return nullptr;
  }
  return new hvd_gpu_event{event, device};
}

int32_t event_query(hvd_gpu_event* event, hvd_gpu_status* status) {
  cudaError_t err = cudaEventQuery(event->event);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) return 0;
  cuda_ok(err, "cudaEventQuery (an earlier kernel or copy failed)", status);
  return -1;
}

void event_destroy(hvd_gpu_event* event) {
  if (event == nullptr) return;
  cudaEventDestroy(event->event);
  delete event;
}

hvd_gpu_stream* stream_create(int32_t device, hvd_gpu_status* status) {
  DeviceGuard guard(device);
  if (!guard.ok(status)) return nullptr;
  // Highest priority, as Horovod's NCCL streams: gradients in flight should
  // not queue behind the framework's compute kernels.
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStream_t stream;
  if (!cuda_ok(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), "cudaStreamCreate", status)) {
    return nullptr;
  }
  return new hvd_gpu_stream{stream, device};
}

void stream_destroy(hvd_gpu_stream* stream) {
  if (stream == nullptr) return;
  DeviceGuard guard(stream->device);
  cudaStreamSynchronize(stream->stream);
  cudaStreamDestroy(stream->stream);
  delete stream;
}

int32_t stream_wait_event(hvd_gpu_stream* stream, hvd_gpu_event* event, hvd_gpu_status* status) {
  DeviceGuard guard(stream->device);
  return cuda_ok(cudaStreamWaitEvent(stream->stream, event->event, 0), "cudaStreamWaitEvent", status) ? 0 : -1;
}

hvd_gpu_event* stream_mark(hvd_gpu_stream* stream, hvd_gpu_status* status) {
  return event_record(stream->device, stream->stream, status);
}

int32_t stream_synchronize(hvd_gpu_stream* stream, hvd_gpu_status* status) {
  DeviceGuard guard(stream->device);
  return cuda_ok(cudaStreamSynchronize(stream->stream), "cudaStreamSynchronize", status) ? 0 : -1;
}

int32_t copy(hvd_gpu_stream* stream, void* dst, const void* src, size_t bytes, int32_t kind, hvd_gpu_status* status) {
  if (bytes == 0 || dst == src) return 0;
  DeviceGuard guard(stream->device);
  cudaMemcpyKind k = kind == HVD_GPU_DEVICE_TO_HOST   ? cudaMemcpyDeviceToHost
                     : kind == HVD_GPU_HOST_TO_DEVICE ? cudaMemcpyHostToDevice
                                                      : cudaMemcpyDeviceToDevice;
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, k, stream->stream), "cudaMemcpyAsync", status) ? 0 : -1;
}

int32_t zero(hvd_gpu_stream* stream, void* dst, size_t bytes, hvd_gpu_status* status) {
  if (bytes == 0) return 0;
  DeviceGuard guard(stream->device);
  return cuda_ok(cudaMemsetAsync(dst, 0, bytes, stream->stream), "cudaMemsetAsync", status) ? 0 : -1;
}

int32_t copy_scaled(hvd_gpu_stream* stream, const hvd_gpu_copy* copies, size_t num_copies, int32_t dtype,
                    double factor, hvd_gpu_status* status) {
  DeviceGuard guard(stream->device);
  if (!guard.ok(status)) return -1;
  return cuda_ok(launch_copy_scaled(copies, num_copies, dtype, factor, stream->stream), "the copy/scale kernel",
                 status)
             ? 0
             : -1;
}

void* device_alloc(int32_t device, size_t bytes, hvd_gpu_status* status) {
  DeviceGuard guard(device);
  if (!guard.ok(status)) return nullptr;
  void* ptr = nullptr;
  if (!cuda_ok(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc", status)) return nullptr;
  return ptr;
}

void device_free(int32_t device, void* ptr) {
  if (ptr == nullptr) return;
  DeviceGuard guard(device);
  cudaFree(ptr);  // synchronizes: no stream may still use the memory
}

void* host_alloc(size_t bytes, hvd_gpu_status* status) {
  void* ptr = nullptr;
  if (!cuda_ok(cudaMallocHost(&ptr, bytes == 0 ? 1 : bytes), "cudaMallocHost", status)) return nullptr;
  return ptr;
}

void host_free(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

// ---------------------------------------------------------------------------
// NCCL

int32_t nccl_open(const char* path, hvd_gpu_status* status) {
  std::string error;
  const NcclLibrary* nccl = load_nccl(path, &error);
  if (nccl == nullptr) return fail(status, HVD_ERROR_UNSUPPORTED, error);
  g_nccl = nccl;
  return nccl->version;
}

int32_t nccl_supports(int32_t dtype, int32_t op) {
  ncclDataType_t t;
  ncclRedOp_t o;
  return nccl_type(dtype, &t) && nccl_op(op, &o) ? 1 : 0;
}

int32_t nccl_unique_id(void* id, hvd_gpu_status* status) {
  if (!need_nccl(status)) return -1;
  ncclUniqueId uid;
  if (!nccl_ok(g_nccl->GetUniqueId(&uid), "ncclGetUniqueId", nullptr, status)) return -1;
  std::memcpy(id, uid.internal, sizeof(uid.internal));
  return 0;
}

hvd_gpu_comm* nccl_comm_create(int32_t device, int32_t nranks, int32_t rank, const void* id, hvd_gpu_status* status) {
  if (!need_nccl(status)) return nullptr;
  DeviceGuard guard(device);
  if (!guard.ok(status)) return nullptr;
  ncclUniqueId uid;
  std::memcpy(uid.internal, id, sizeof(uid.internal));
  ncclComm_t comm = nullptr;
  if (!nccl_ok(g_nccl->CommInitRank(&comm, nranks, uid, rank), "ncclCommInitRank", nullptr, status)) return nullptr;
  return new hvd_gpu_comm{comm, device, nranks, rank};
}

void nccl_comm_abort(hvd_gpu_comm* comm) {
  if (comm == nullptr) return;
  DeviceGuard guard(comm->device);
  g_nccl->CommAbort(comm->comm);
  delete comm;
}

void nccl_comm_destroy(hvd_gpu_comm* comm) {
  if (comm == nullptr) return;
  DeviceGuard guard(comm->device);
  g_nccl->CommDestroy(comm->comm);
  delete comm;
}

int32_t nccl_comm_check(hvd_gpu_comm* comm, hvd_gpu_status* status) {
  ncclResult_t async = ncclSuccess;
  if (!nccl_ok(g_nccl->CommGetAsyncError(comm->comm, &async), "ncclCommGetAsyncError", comm->comm, status)) return -1;
  return nccl_ok(async, "an NCCL operation (asynchronous error)", comm->comm, status) ? 0 : -1;
}

int32_t nccl_allreduce(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out, size_t count,
                       int32_t dtype, int32_t op, hvd_gpu_status* status) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_type(dtype, &t) || !nccl_op(op, &o)) return fail(status, HVD_ERROR_UNSUPPORTED, "NCCL cannot reduce this dtype");
  if (count == 0) return 0;
  DeviceGuard guard(stream->device);
  return nccl_ok(g_nccl->AllReduce(in, out, count, t, o, comm->comm, stream->stream), "ncclAllReduce", comm->comm,
                 status)
             ? 0
             : -1;
}

int32_t nccl_broadcast(hvd_gpu_comm* comm, hvd_gpu_stream* stream, void* data, size_t bytes, int32_t root,
                       hvd_gpu_status* status) {
  if (bytes == 0) return 0;
  DeviceGuard guard(stream->device);
  return nccl_ok(g_nccl->Broadcast(data, data, bytes, ncclUint8, root, comm->comm, stream->stream), "ncclBroadcast",
                 comm->comm, status)
             ? 0
             : -1;
}

// Several NCCL calls as one group; the group is closed even when a call in it fails.
template <typename Body>
int32_t nccl_group(hvd_gpu_comm* comm, const char* what, hvd_gpu_status* status, Body body) {
  if (!nccl_ok(g_nccl->GroupStart(), "ncclGroupStart", comm->comm, status)) return -1;
  ncclResult_t first = ncclSuccess;
  body(&first);
  ncclResult_t end = g_nccl->GroupEnd();
  if (!nccl_ok(first, what, comm->comm, status)) return -1;
  return nccl_ok(end, what, comm->comm, status) ? 0 : -1;
}

int32_t nccl_allgatherv(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out,
                        const size_t* bytes_per_rank, hvd_gpu_status* status) {
  DeviceGuard guard(stream->device);
  bool uniform = true;
  size_t total = 0;
  for (int m = 0; m < comm->nranks; ++m) {
    uniform = uniform && bytes_per_rank[m] == bytes_per_rank[0];
    total += bytes_per_rank[m];
  }
  if (total == 0) return 0;
  if (uniform) {
    return nccl_ok(g_nccl->AllGather(in, out, bytes_per_rank[0], ncclUint8, comm->comm, stream->stream),
                   "ncclAllGather", comm->comm, status)
               ? 0
               : -1;
  }
  // Uneven first dimensions: every member broadcasts its block into place.
  return nccl_group(comm, "ncclBroadcast (allgatherv)", status, [&](ncclResult_t* first) {
    size_t offset = 0;
    for (int m = 0; m < comm->nranks; ++m) {
      char* dst = static_cast<char*>(out) + offset;
      if (bytes_per_rank[m] > 0) {
        ncclResult_t r = g_nccl->Broadcast(m == comm->rank ? in : dst, dst, bytes_per_rank[m], ncclUint8, m,
                                           comm->comm, stream->stream);
        if (r != ncclSuccess && *first == ncclSuccess) *first = r;
      }
      offset += bytes_per_rank[m];
    }
  });
}

int32_t nccl_alltoallv(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, const size_t* send_bytes, void* out,
                       const size_t* recv_bytes, hvd_gpu_status* status) {
  DeviceGuard guard(stream->device);
  size_t send_offset = 0, recv_offset = 0;
  size_t self_send = 0, self_recv = 0;
  for (int m = 0; m < comm->nranks; ++m) {
    if (m == comm->rank) {
      self_send = send_offset;
      self_recv = recv_offset;
    }
    send_offset += send_bytes[m];
    recv_offset += recv_bytes[m];
  }
  if (send_bytes[comm->rank] > 0 &&
      !cuda_ok(cudaMemcpyAsync(static_cast<char*>(out) + self_recv, static_cast<const char*>(in) + self_send,
                               send_bytes[comm->rank], cudaMemcpyDeviceToDevice, stream->stream),
               "cudaMemcpyAsync (alltoall)", status)) {
    return -1;
  }
  return nccl_group(comm, "ncclSend/ncclRecv (alltoall)", status, [&](ncclResult_t* first) {
    size_t so = 0, ro = 0;
    for (int m = 0; m < comm->nranks; ++m) {
      if (m != comm->rank) {
        ncclResult_t r = ncclSuccess;
        if (send_bytes[m] > 0) {
          r = g_nccl->Send(static_cast<const char*>(in) + so, send_bytes[m], ncclUint8, m, comm->comm, stream->stream);
          if (r != ncclSuccess && *first == ncclSuccess) *first = r;
        }
        if (recv_bytes[m] > 0) {
          r = g_nccl->Recv(static_cast<char*>(out) + ro, recv_bytes[m], ncclUint8, m, comm->comm, stream->stream);
          if (r != ncclSuccess && *first == ncclSuccess) *first = r;
        }
      }
      so += send_bytes[m];
      ro += recv_bytes[m];
    }
  });
}

int32_t nccl_reducescatterv(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out,
                            const size_t* counts, int32_t dtype, int32_t op, hvd_gpu_status* status) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_type(dtype, &t) || !nccl_op(op, &o)) return fail(status, HVD_ERROR_UNSUPPORTED, "NCCL cannot reduce this dtype");
  DeviceGuard guard(stream->device);
  bool uniform = true;
  for (int m = 0; m < comm->nranks; ++m) uniform = uniform && counts[m] == counts[0];
  if (uniform) {
    if (counts[0] == 0) return 0;
    return nccl_ok(g_nccl->ReduceScatter(in, out, counts[0], t, o, comm->comm, stream->stream), "ncclReduceScatter",
                   comm->comm, status)
               ? 0
               : -1;
  }
  // Uneven blocks: one reduce to each member, as one group.
  const size_t esize = element_size(dtype);
  return nccl_group(comm, "ncclReduce (reducescatter)", status, [&](ncclResult_t* first) {
    size_t offset = 0;
    for (int m = 0; m < comm->nranks; ++m) {
      if (counts[m] > 0) {
        ncclResult_t r = g_nccl->Reduce(static_cast<const char*>(in) + offset * esize, out, counts[m], t, o, m,
                                        comm->comm, stream->stream);
        if (r != ncclSuccess && *first == ncclSuccess) *first = r;
      }
      offset += counts[m];
    }
  });
}

int32_t nccl_reduce(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out, size_t count,
                    int32_t dtype, int32_t op, int32_t root, hvd_gpu_status* status) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (!nccl_type(dtype, &t) || !nccl_op(op, &o)) return fail(status, HVD_ERROR_UNSUPPORTED, "NCCL cannot reduce this dtype");
  if (count == 0) return 0;
  DeviceGuard guard(stream->device);
  return nccl_ok(g_nccl->Reduce(in, out, count, t, o, root, comm->comm, stream->stream), "ncclReduce", comm->comm,
                 status)
             ? 0
             : -1;
}

const hvd_gpu_plugin kPlugin = {
    sizeof(hvd_gpu_plugin),
    HVD_GPU_PLUGIN_ABI,
    describe,
    device_bus_id,
    event_record,
    event_query,
    event_destroy,
    stream_create,
    stream_destroy,
    stream_wait_event,
    stream_mark,
    stream_synchronize,
    copy,
    zero,
    copy_scaled,
    device_alloc,
    device_free,
    host_alloc,
    host_free,
    nccl_open,
    nccl_supports,
    nccl_unique_id,
    nccl_comm_create,
    nccl_comm_abort,
    nccl_comm_destroy,
    nccl_comm_check,
    nccl_allreduce,
    nccl_broadcast,
    nccl_allgatherv,
    nccl_alltoallv,
    nccl_reducescatterv,
    nccl_reduce,
};

}  // namespace
}  // namespace cuda
}  // namespace hvd

HVD_GPU_EXPORT const hvd_gpu_plugin* hvd_gpu_plugin_get(void) { return &hvd::cuda::kPlugin; }
