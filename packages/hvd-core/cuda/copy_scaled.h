// copy_scaled.h - the batched copy-and-scale kernel (copy_scaled.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/gpu_plugin.h"

namespace hvd {
namespace cuda {

// Queues dst = src * factor for every entry on `stream` (one launch per 120
// entries). dtype is an hvd::DataType value; factor 1 copies.
cudaError_t launch_copy_scaled(const hvd_gpu_copy* copies, size_t num_copies, int32_t dtype, double factor,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace hvd
