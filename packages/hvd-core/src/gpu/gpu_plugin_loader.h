// gpu_plugin_loader.h - finds and opens libhvd_core_cuda.so (the CUDA
// plugin, gpu_plugin.h) the first time the engine needs it, and NCCL
// through it. Nothing here links CUDA: a CPU-only install simply has no
// plugin, and every question below then answers "no" with the reason.
#pragma once

#include <string>

#include "gpu/gpu_plugin.h"

namespace hvd {

struct GpuSupport {
  const hvd_gpu_plugin* plugin = nullptr;  // null: no CUDA support (see why)
  const hvd_gpu_plugin* library = nullptr;  // the plugin, loaded even where no GPU is (cuda_built)
  int device_count = 0;
  int nccl_version = 0;       // 0: NCCL could not be loaded (see nccl_error)
  std::string description;    // "CUDA runtime 13.0, driver 13.0, 1 device(s)"
  std::string why;            // why plugin is null
  std::string nccl_error;     // why nccl_version is 0
};

// Loads the plugin (HVD_CUDA_PLUGIN overrides its path; by default it sits
// next to libhvd_core.so) and asks it for devices, once per process.
const GpuSupport& gpu_support();
// Loads NCCL through the plugin, once; afterwards gpu_support().nccl_version
// and nccl_error tell the outcome.
const GpuSupport& gpu_support_with_nccl();

// Throws Error(status.code, context + ": " + status.message).
[[noreturn]] void throw_gpu_status(const hvd_gpu_status& status, const std::string& context);

// Calls a plugin function that reports failure by a non-zero return (its
// last argument is the status) and throws, naming `context`, when it fails.
template <typename Fn, typename... Args>
void gpu_call(const char* context, Fn fn, Args... args) {
  hvd_gpu_status status{};
  if (fn(args..., &status) != 0) throw_gpu_status(status, context);
}

// The device of the most recent CUDA tensor this process enqueued (0 before
// any): where a rank that joined takes part in GPU collectives with zeros.
int last_cuda_device();
void note_cuda_device(int device);

}  // namespace hvd
