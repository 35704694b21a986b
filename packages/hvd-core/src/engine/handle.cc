// handle.cc - completion, waiting and result ownership of hvd_handle.
#include "engine/handle.h"

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "engine/host_result_pool.h"
#include "gpu/gpu_plugin_loader.h"

namespace hvd {
namespace {

// Lives at the start of a malloc'ed block; a host result below the pool's
// sizes lies in the same block, behind it (data_inline): one allocation a
// result instead of a separate aligned one, which cost a small lane
// allgather about a tenth of its time in malloc and free.
struct OwnedTensor {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t pooled_capacity = 0;          // > 0: the block came from HostResultPool
  std::function<void(void*)> release;  // set: `where`'s memory
};

void destroy_owned(OwnedTensor* owned) {
  owned->~OwnedTensor();
  std::free(owned);
}

void owned_tensor_deleter(DLManagedTensor* self) {
  auto* owned = static_cast<OwnedTensor*>(self->manager_ctx);
  if (owned->release) owned->release(owned->data);
  else if (owned->pooled_capacity > 0) HostResultPool::instance().release(owned->data, owned->pooled_capacity);
  destroy_owned(owned);
}

// 64-byte alignment suits vectorised kernels and every framework's importer.
constexpr size_t kResultAlignment = 64;

}  // namespace

DLManagedTensor* make_owned_tensor(const std::vector<int64_t>& shape, DataType dtype, const MemoryResource* where) {
  size_t bytes = dtype_size(dtype);
  for (auto d : shape) bytes *= static_cast<size_t>(d);
  auto out_of_memory = [bytes] {
    throw_error(ErrorCode::kInternal, "out of memory allocating a " + std::to_string(bytes) + "-byte result");
  };
  const bool data_inline = where == nullptr && bytes < HostResultPool::kMinPooledBytes;
  void* block = std::malloc(sizeof(OwnedTensor) + (data_inline ? bytes + kResultAlignment - 1 : 0));
  if (block == nullptr) out_of_memory();
  std::unique_ptr<OwnedTensor, void (*)(OwnedTensor*)> owned(new (block) OwnedTensor(), destroy_owned);
  owned->shape = shape;
  if (data_inline) {
    const auto behind = reinterpret_cast<uintptr_t>(owned.get() + 1);
    owned->data = reinterpret_cast<void*>((behind + kResultAlignment - 1) / kResultAlignment * kResultAlignment);
  } else if (where != nullptr) {
    owned->data = where->allocate(bytes);
    owned->release = where->release;
  } else {
    owned->data = HostResultPool::instance().allocate(bytes, &owned->pooled_capacity);
    if (owned->data == nullptr) out_of_memory();
  }
  DLTensor& t = owned->managed.dl_tensor;
  t.data = owned->data;
  t.device = where != nullptr ? where->device : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype_to_dlpack(dtype);
  t.shape = owned->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  owned->managed.manager_ctx = owned.get();
  owned->managed.deleter = owned_tensor_deleter;
  return &owned.release()->managed;
}

}  // namespace hvd

hvd_handle::~hvd_handle() {
  for (auto& t : tensors) {
    if (t.owned_result != nullptr && !t.result_taken) t.owned_result->deleter(t.owned_result);
  }
  // A handle with a CUDA event was made after the plugin loaded.
  if (ready_event != nullptr) hvd::gpu_support().plugin->event_destroy(ready_event);
}

namespace hvd {

void handle_unref(hvd_handle* handle) {
  if (handle->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete handle;
}

static void finish(hvd_handle* handle) {
  {
    std::lock_guard<std::mutex> lock(handle->mu);
    handle->completed.store(true, std::memory_order_release);
  }
  handle->cv.notify_all();
  if (handle->on_done != nullptr) handle->on_done(handle->on_done_ctx, handle);
  handle_unref(handle);
}

void handle_complete_tensor(hvd_handle* handle, size_t index, const Error* error) {
  (void)index;
  if (error != nullptr && !handle->failed) {
    handle->failed = true;
    handle->error = *error;
  }
  if (handle->remaining == 0) return;  // already finished (defensive)
  if (--handle->remaining == 0) finish(handle);
}

void handle_fail_all(hvd_handle* handle, const Error& error) {
  if (handle->remaining == 0) return;
  if (!handle->failed) {
    handle->failed = true;
    handle->error = error;
  }
  handle->remaining = 0;
  finish(handle);
}

namespace {

// How long a waiting caller keeps driving the engine before it sleeps and
// leaves the work to the background thread. Long enough for any small
// collective; short enough that a rank waiting for a slow peer does not burn
// a core for long.
constexpr auto kDriveBudget = std::chrono::microseconds(2000);

thread_local bool t_driving = false;  // completion callbacks may wait too

}  // namespace

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool handle_blocked_since(const hvd_handle* handle, int64_t now_ns, double min_seconds,
                          double unwaited_callback_seconds) {
  // A gap shorter than this between two waits is the same caller still waiting.
  constexpr int64_t kRewaitGapNs = 1000000000;
  int64_t first = handle->first_wait_ns.load(std::memory_order_relaxed);
  if (first == 0 && handle->on_done != nullptr) {
    return now_ns - handle->enqueued_ns >= static_cast<int64_t>(unwaited_callback_seconds * 1e9);
  }
  if (first == 0 || now_ns - first < static_cast<int64_t>(min_seconds * 1e9)) return false;
  return handle->waiters.load(std::memory_order_relaxed) > 0 ||
         now_ns - handle->last_wait_end_ns.load(std::memory_order_relaxed) < kRewaitGapNs;
}

namespace {

// Marks a caller as waiting on a handle for the duration of handle_wait.
class WaitMark {
 public:
  explicit WaitMark(hvd_handle* handle) : handle_(handle) {
    int64_t unset = 0;
    handle_->first_wait_ns.compare_exchange_strong(unset, steady_now_ns(), std::memory_order_relaxed);
    handle_->waiters.fetch_add(1, std::memory_order_relaxed);
  }
  ~WaitMark() {
    handle_->last_wait_end_ns.store(steady_now_ns(), std::memory_order_relaxed);
    handle_->waiters.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  hvd_handle* handle_;
};

}  // namespace

bool handle_wait(hvd_handle* handle, double timeout_seconds) {
  auto done = [&] { return handle->completed.load(std::memory_order_acquire); };
  if (done()) return true;
  WaitMark mark(handle);
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Driver> driver = handle->driver.lock();
  if (driver && !t_driving && driver->callers_may_drive()) {
    auto drive_until = start + kDriveBudget;
    if (timeout_seconds >= 0) {
      drive_until = std::min(drive_until, start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                      std::chrono::duration<double>(timeout_seconds)));
    }
    t_driving = true;
    driver->begin_driving();
    const bool yield_each_step = driver->callers_should_yield();
    while (!done() && std::chrono::steady_clock::now() < drive_until) {
      if (driver->drive_once() && !yield_each_step) continue;
      // Either the background thread holds the engine and will finish the
      // work, or our CPU is better spent on a rank we are waiting for.
      std::this_thread::yield();
    }
    driver->end_driving();
    t_driving = false;
    if (done()) return true;
    driver->wake();
  }
  driver.reset();
  std::unique_lock<std::mutex> lock(handle->mu);
  if (timeout_seconds < 0) {
    handle->cv.wait(lock, done);
    return true;
  }
  auto remaining = std::chrono::duration<double>(timeout_seconds) - (std::chrono::steady_clock::now() - start);
  return handle->cv.wait_for(lock, remaining, done);
}

}  // namespace hvd
