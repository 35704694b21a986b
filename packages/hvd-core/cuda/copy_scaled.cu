// copy_scaled.cu - the plugin's one kernel family: many (dst, src, count)
// copies in one launch, each element multiplied by a factor on the way. It
// packs tensors into the fusion buffer with the prescale applied, unpacks
// them with the postscale (or the 1/size of an average), and scales a
// tensor in place. One launch for a whole fused response matters because a
// training step fuses ~100 small gradients, and a launch costs microseconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "copy_scaled.h"

namespace hvd {
namespace cuda {
namespace {

// Each block copies one chunk of one entry: the launch is a flat list of
// chunks, and a block finds its entry by binary search over first_block.
constexpr int kThreads = 256;
constexpr size_t kChunkBytes = 64 * 1024;
constexpr int kUnroll = 4;

struct Task {
  void* dst;
  const void* src;
  size_t count;
  size_t first_block;  // index of the entry's first block within the launch
};

// Kernel parameters are limited to 4 KiB: a launch carries at most this many
// entries by value (no host-to-device copy of a task table, so nothing waits).
constexpr int kMaxTasks = 120;

struct Launch {
  Task tasks[kMaxTasks];
  int num_tasks;
  double factor;
};
static_assert(sizeof(Launch) <= 4000, "kernel parameters must fit in 4 KiB");

// dst = src * factor, with the CPU path's rounding (src/reduce/reduce.cc) except
// for float16 (below).
template <typename T>
struct Scale {
  // Integers: computed in double, truncated toward zero.
  __device__ static T apply(T x, double f) { return static_cast<T>(static_cast<double>(x) * f); }
};
template <>
struct Scale<float> {
  __device__ static float apply(float x, double f) { return x * static_cast<float>(f); }
};
template <>
struct Scale<double> {
  __device__ static double apply(double x, double f) { return x * f; }
};
// float16 as Horovod's GPU kernels (and torch's half arithmetic): the factor
// is rounded to half first, and the product of two halves, exact in float,
// is rounded once. (The CPU path multiplies by the float factor.)
template <>
struct Scale<__half> {
  __device__ static __half apply(__half x, double f) {
    return __float2half_rn(__half2float(x) * __half2float(__float2half_rn(static_cast<float>(f))));
  }
};
template <>
struct Scale<__nv_bfloat16> {
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, double f) {
    return __float2bfloat16_rn(__bfloat162float(x) * static_cast<float>(f));
  }
};
struct Bool {
  uint8_t v;
};
template <>
struct Scale<Bool> {
  __device__ static Bool apply(Bool x, double f) { return Bool{static_cast<uint8_t>(x.v != 0 && f != 0.0)}; }
};

template <typename T, bool kScaled>
__device__ __forceinline__ T convert(T x, double f) {
  if constexpr (kScaled) return Scale<T>::apply(x, f);
  else return x;
}

template <typename T, bool kScaled>
__device__ __forceinline__ uint4 convert_vector(uint4 v, double f) {
  if constexpr (!kScaled) {
    return v;
  } else {
    constexpr int kLanes = sizeof(uint4) / sizeof(T);
    T lanes[kLanes];
    memcpy(lanes, &v, sizeof(v));
#pragma unroll
    for (int k = 0; k < kLanes; ++k) lanes[k] = Scale<T>::apply(lanes[k], f);
    memcpy(&v, lanes, sizeof(v));
    return v;
  }
}

__device__ __forceinline__ int find_task(const Launch& launch, size_t block) {
  int lo = 0, hi = launch.num_tasks - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (launch.tasks[mid].first_block <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T, bool kScaled>
__global__ void __launch_bounds__(kThreads) copy_scaled_kernel(const __grid_constant__ Launch launch) {
  const size_t block = blockIdx.x;
  const Task& task = launch.tasks[find_task(launch, block)];
  constexpr size_t kPerBlock = kChunkBytes / sizeof(T);
  const size_t begin = (block - task.first_block) * kPerBlock;
  const size_t end = begin + kPerBlock < task.count ? begin + kPerBlock : task.count;
  const T* src = static_cast<const T*>(task.src) + begin;
  T* dst = static_cast<T*>(task.dst) + begin;
  const size_t n = end - begin;
  const double f = launch.factor;
  size_t done = 0;
  // 16-byte vectors when src and dst are equally misaligned (the usual case:
  // both aligned), after a scalar head that brings them to a 16-byte boundary.
  const uintptr_t misaligned = reinterpret_cast<uintptr_t>(src) % sizeof(uint4);
  if (misaligned == reinterpret_cast<uintptr_t>(dst) % sizeof(uint4) && misaligned % sizeof(T) == 0) {
    constexpr size_t kLanes = sizeof(uint4) / sizeof(T);
    size_t head = (sizeof(uint4) - misaligned) % sizeof(uint4) / sizeof(T);
    if (head > n) head = n;
    for (size_t k = threadIdx.x; k < head; k += kThreads) dst[k] = convert<T, kScaled>(src[k], f);
    const size_t vectors = (n - head) / kLanes;
    const uint4* vsrc = reinterpret_cast<const uint4*>(src + head);
    uint4* vdst = reinterpret_cast<uint4*>(dst + head);
    for (size_t v = threadIdx.x; v < vectors; v += kThreads * kUnroll) {
      uint4 buf[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (v + u * kThreads < vectors) buf[u] = vsrc[v + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (v + u * kThreads < vectors) vdst[v + u * kThreads] = convert_vector<T, kScaled>(buf[u], f);
      }
    }
    done = head + vectors * kLanes;
  }
  for (size_t k = done + threadIdx.x; k < n; k += kThreads) dst[k] = convert<T, kScaled>(src[k], f);
}

template <typename T>
cudaError_t launch_typed(const hvd_gpu_copy* copies, size_t num_copies, double factor, cudaStream_t stream) {
  constexpr size_t kPerBlock = kChunkBytes / sizeof(T);
  const bool scaled = factor != 1.0;
  Launch launch;
  size_t i = 0;
  while (i < num_copies) {
    launch.num_tasks = 0;
    launch.factor = factor;
    size_t blocks = 0;
    for (; i < num_copies && launch.num_tasks < kMaxTasks; ++i) {
      if (copies[i].count == 0 || (!scaled && copies[i].dst == copies[i].src)) continue;
      launch.tasks[launch.num_tasks++] = Task{copies[i].dst, copies[i].src, copies[i].count, blocks};
      blocks += (copies[i].count + kPerBlock - 1) / kPerBlock;
    }
    if (blocks == 0) continue;
    if (scaled) copy_scaled_kernel<T, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(launch);
    else copy_scaled_kernel<T, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(launch);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

// dtype values are hvd::DataType's (src/common/dtype.h).
cudaError_t launch_copy_scaled(const hvd_gpu_copy* copies, size_t num_copies, int32_t dtype, double factor,
                               cudaStream_t stream) {
  switch (dtype) {
    case 0: return launch_typed<uint8_t>(copies, num_copies, factor, stream);         // uint8
    case 1: return launch_typed<int8_t>(copies, num_copies, factor, stream);          // int8
    case 2: return launch_typed<uint16_t>(copies, num_copies, factor, stream);        // uint16
    case 3: return launch_typed<int16_t>(copies, num_copies, factor, stream);         // int16
    case 4: return launch_typed<int32_t>(copies, num_copies, factor, stream);         // int32
    case 5: return launch_typed<int64_t>(copies, num_copies, factor, stream);         // int64
    case 6: return launch_typed<__half>(copies, num_copies, factor, stream);          // float16
    case 7: return launch_typed<__nv_bfloat16>(copies, num_copies, factor, stream);   // bfloat16
    case 8: return launch_typed<float>(copies, num_copies, factor, stream);           // float32
    case 9: return launch_typed<double>(copies, num_copies, factor, stream);          // float64
    case 10: return launch_typed<Bool>(copies, num_copies, factor, stream);           // bool
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace hvd
