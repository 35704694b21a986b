// nccl_library.cc - see nccl_library.h.
#include "nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace hvd {
namespace cuda {
namespace {

template <typename Fn>
bool bind(void* lib, const char* name, Fn* fn, bool required, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr && required) {
    *missing += (missing->empty() ? "" : ", ") + std::string(name);
    return false;
  }
  return true;
}

std::mutex g_mu;
NcclLibrary* g_loaded = nullptr;

}  // namespace

const NcclLibrary* load_nccl(const char* path, std::string* error) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_loaded != nullptr) return g_loaded;
  // Candidates in order: the explicit path, HVD_NCCL_LIBRARY (nothing else
  // when set), then libnccl.so.2 by the loader's search - which finds a copy
  // the framework already loaded - then each folder of HVD_NCCL_DIRS
  // (horovod.common puts nvidia-nccl-cu13's there).
  std::vector<std::string> candidates;
  const char* env = std::getenv("HVD_NCCL_LIBRARY");
  if (path != nullptr && *path) {
    candidates.push_back(path);
  } else if (env != nullptr && *env) {
    candidates.push_back(env);
  } else {
    candidates.push_back("libnccl.so.2");
    const char* dirs = std::getenv("HVD_NCCL_DIRS");
    std::string rest = dirs != nullptr ? dirs : "";
    for (size_t start = 0; start < rest.size();) {
      size_t end = rest.find(':', start);
      if (end == std::string::npos) end = rest.size();
      if (end > start) candidates.push_back(rest.substr(start, end - start) + "/libnccl.so.2");
      start = end + 1;
    }
  }
  void* lib = nullptr;
  std::string where, failures;
  for (const auto& candidate : candidates) {
    lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      where = candidate;
      break;
    }
    const char* why = dlerror();
    failures += (failures.empty() ? "" : "; ") + std::string(why ? why : candidate + ": unknown reason");
  }
  if (lib == nullptr) {
    *error = "cannot load NCCL (" + failures +
             "); install nvidia-nccl-cu13, or set HVD_NCCL_LIBRARY to a libnccl.so.2";
    return nullptr;
  }
  auto* nccl = new NcclLibrary();
  nccl->path = where;
  std::string missing;
  bool ok = true;
  ok &= bind(lib, "ncclGetVersion", &nccl->GetVersion, true, &missing);
  ok &= bind(lib, "ncclGetUniqueId", &nccl->GetUniqueId, true, &missing);
  ok &= bind(lib, "ncclCommInitRank", &nccl->CommInitRank, true, &missing);
  ok &= bind(lib, "ncclCommAbort", &nccl->CommAbort, true, &missing);
  ok &= bind(lib, "ncclCommDestroy", &nccl->CommDestroy, true, &missing);
  ok &= bind(lib, "ncclCommGetAsyncError", &nccl->CommGetAsyncError, true, &missing);
  ok &= bind(lib, "ncclGetErrorString", &nccl->GetErrorString, true, &missing);
  bind(lib, "ncclGetLastError", &nccl->GetLastError, false, &missing);
  ok &= bind(lib, "ncclAllReduce", &nccl->AllReduce, true, &missing);
  ok &= bind(lib, "ncclBroadcast", &nccl->Broadcast, true, &missing);
  ok &= bind(lib, "ncclReduce", &nccl->Reduce, true, &missing);
  ok &= bind(lib, "ncclAllGather", &nccl->AllGather, true, &missing);
  ok &= bind(lib, "ncclReduceScatter", &nccl->ReduceScatter, true, &missing);
  ok &= bind(lib, "ncclSend", &nccl->Send, true, &missing);
  ok &= bind(lib, "ncclRecv", &nccl->Recv, true, &missing);
  ok &= bind(lib, "ncclGroupStart", &nccl->GroupStart, true, &missing);
  ok &= bind(lib, "ncclGroupEnd", &nccl->GroupEnd, true, &missing);
  if (!ok) {
    *error = "'" + where + "' is not a usable NCCL: it lacks " + missing;
    delete nccl;
    dlclose(lib);
    return nullptr;
  }
  if (nccl->GetVersion(&nccl->version) != ncclSuccess) nccl->version = 0;
  // bfloat16 (2.10), ncclGetLastError and a reliable ncclCommAbort (2.12+).
  if (nccl->version < 21200) {
    *error = "'" + where + "' is NCCL version code " + std::to_string(nccl->version) +
             "; hvd needs NCCL 2.12 or later";
    delete nccl;
    dlclose(lib);
    return nullptr;
  }
  g_loaded = nccl;  // kept for the life of the process, as NCCL itself expects
  return nccl;
}

}  // namespace cuda
}  // namespace hvd
