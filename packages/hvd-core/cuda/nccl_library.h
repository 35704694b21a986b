// nccl_library.h - NCCL, opened with dlopen at run time: the plugin links no
// NCCL, so it loads where NCCL is absent and uses whichever libnccl.so.2 the
// job has (nvidia-nccl-cu13's, the one PyTorch already loaded, a system one).
//
// Only the types and functions hvd calls are declared here, with the values
// of NCCL's public header (stable across NCCL 2.x releases).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace hvd {
namespace cuda {

using ncclComm_t = struct ncclComm*;
enum ncclResult_t : int { ncclSuccess = 0, ncclInProgress = 7 };
enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};
enum ncclRedOp_t : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
struct ncclUniqueId {
  char internal[128];
};

struct NcclLibrary {
  int version = 0;  // NCCL's code: major * 10000 + minor * 100 + patch (2.9 and later)
  std::string path;

  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;  // NCCL 2.13 and later; may stay null
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
};

// Loads NCCL once per process: from `path` when given, else HVD_NCCL_LIBRARY,
// else "libnccl.so.2" by the loader's search (an already loaded copy first).
// Returns null with *error set when it cannot (missing file, missing symbol,
// NCCL older than 2.12).
const NcclLibrary* load_nccl(const char* path, std::string* error);

}  // namespace cuda
}  // namespace hvd
