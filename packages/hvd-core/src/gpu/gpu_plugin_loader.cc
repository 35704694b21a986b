// gpu_plugin_loader.cc - see gpu_plugin_loader.h.
#include "gpu/gpu_plugin_loader.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "common/error.h"
#include "common/logging.h"

namespace hvd {
namespace {

std::mutex g_mu;  // guards the NCCL fields of the GpuSupport
bool g_nccl_tried = false;
std::atomic<int> g_last_device{0};

// The folder of libhvd_core.so itself, where the wheel installs the plugin.
std::string own_directory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

GpuSupport* load() {
  auto* support = new GpuSupport();
  const char* env = std::getenv("HVD_CUDA_PLUGIN");
  std::string path = env != nullptr && *env ? env : own_directory() + "libhvd_core_cuda.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    support->why = "this hvd-core has no usable CUDA plugin (" + std::string(why ? why : path) +
                   "); it was built without the CUDA toolkit, or HVD_CUDA_PLUGIN points elsewhere";
    return support;
  }
  auto get = reinterpret_cast<hvd_gpu_plugin_get_fn>(dlsym(lib, HVD_GPU_PLUGIN_ENTRY));
  const hvd_gpu_plugin* plugin = get != nullptr ? get() : nullptr;
  if (plugin == nullptr || plugin->abi_version != HVD_GPU_PLUGIN_ABI || plugin->struct_size < sizeof(hvd_gpu_plugin)) {
    support->why = "'" + path + "' is not a CUDA plugin of this hvd-core (plugin ABI " +
                   (plugin ? std::to_string(plugin->abi_version) : std::string("unknown")) + ", expected " +
                   std::to_string(HVD_GPU_PLUGIN_ABI) + "); reinstall hvd-core";
    return support;
  }
  support->library = plugin;
  hvd_gpu_status status{};
  char description[256] = {0};
  int count = plugin->describe(description, sizeof(description), &status);
  if (count <= 0) {
    support->why = count < 0 ? std::string(status.message) : "the CUDA driver reports no device";
    return support;
  }
  support->device_count = count;
  support->description = description;
  support->plugin = plugin;
  HVD_LOG(kDebug, "CUDA plugin " << path << ": " << description);
  return support;
}

}  // namespace

const GpuSupport& gpu_support() {
  // Loaded once (C++ makes the first call initialize it, others wait), kept
  // for the life of the process; later calls take no lock.
  static GpuSupport* const support = load();
  return *support;
}

// NCCL loads without a GPU (it opens CUDA only for communicators), so
// nccl_built() tells the truth on any machine with the plugin.
const GpuSupport& gpu_support_with_nccl() {
  auto& support = const_cast<GpuSupport&>(gpu_support());
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_nccl_tried) {
    g_nccl_tried = true;
    hvd_gpu_status status{};
    int version = support.library != nullptr ? support.library->nccl_open(nullptr, &status) : -1;
    if (version > 0) support.nccl_version = version;
    else support.nccl_error = support.library != nullptr ? status.message : support.why;
  }
  return support;
}

void throw_gpu_status(const hvd_gpu_status& status, const std::string& context) {
  auto code = status.code == 0 ? ErrorCode::kInternal : static_cast<ErrorCode>(status.code);
  throw_error(code, context + ": " + status.message);
}

int last_cuda_device() { return g_last_device.load(std::memory_order_relaxed); }
void note_cuda_device(int device) { g_last_device.store(device, std::memory_order_relaxed); }

}  // namespace hvd
