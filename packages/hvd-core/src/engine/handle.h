// handle.h - one enqueued operation (a single tensor or a group) and the
// handle the caller waits on. The C ABI's opaque `hvd_handle` is this struct.
// It is reference counted: the caller holds one reference until
// hvd_handle_release(), the engine holds one until completion has been
// signalled and the completion callback has returned.
#pragma once

#include <atomic>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/message.h"
#include "gpu/gpu_plugin.h"
#include "hvd/c_api.h"

namespace hvd {

// Where a core-owned result lives when not in host memory (a GPU's).
struct MemoryResource {
  DLDevice device;
  std::function<void*(size_t bytes)> allocate;  // throws Error when it cannot
  std::function<void(void* data)> release;
};

// A core-owned result tensor handed out as a DLManagedTensor: host memory,
// or `where`'s.
DLManagedTensor* make_owned_tensor(const std::vector<int64_t>& shape, DataType dtype,
                                   const MemoryResource* where = nullptr);

// Something that can advance the engine on the calling thread (the process
// set runtime). A thread blocked in handle_wait() drives it instead of
// sleeping: handing work to another thread and back costs two wake-ups,
// which on virtual machines cost tens of microseconds each.
class Driver {
 public:
  virtual ~Driver() = default;
  // Runs one non-blocking step of the engine if no other thread is doing so;
  // returns false when it could not (another thread drives, or stopped).
  virtual bool drive_once() = 0;
  // Makes sure the background thread takes over (the caller stops driving).
  virtual void wake() = 0;
  // Whether callers should drive at all.
  virtual bool callers_may_drive() const = 0;
  // Whether a driving caller should give up its CPU between steps (more
  // ranks of the job on this machine than CPUs: the rank it waits for, or
  // the kernel's network processing, may need that CPU).
  virtual bool callers_should_yield() const = 0;
  // Bracket a caller's driving: meanwhile the background thread keeps off
  // the control channels, so a message for the caller does not also wake it.
  virtual void begin_driving() = 0;
  virtual void end_driving() = 0;
};

struct TensorSlot {
  RequestMeta meta;
  const void* input = nullptr;  // data + byte_offset of the caller's input
  int32_t device_id = 0;        // meta.device == kCuda: the CUDA device of input and output
  void* output = nullptr;       // caller-provided output (allreduce/broadcast), or null
  std::vector<int64_t> splits;  // alltoall
  // Results.
  DLManagedTensor* owned_result = nullptr;  // when the core allocated it
  void* result_data = nullptr;              // where the result was written
  std::vector<int64_t> received_splits;
  bool result_taken = false;
};

}  // namespace hvd

struct hvd_handle {
  std::atomic<int> refs{2};  // caller + engine
  int32_t process_set_id = 0;
  std::weak_ptr<hvd::Driver> driver;
  std::vector<hvd::TensorSlot> tensors;
  hvd_alloc_fn alloc = nullptr;
  void* alloc_ctx = nullptr;
  hvd_done_fn on_done = nullptr;
  void* on_done_ctx = nullptr;
  bool caller_waits = false;  // HVD_ENQUEUE_CALLER_WAITS
  // CUDA tensors: completes once the framework's work producing the inputs
  // has (recorded on its stream at enqueue); hvd's stream waits for it.
  hvd_gpu_event* ready_event = nullptr;

  // Callers waiting on this handle (hvd_handle_wait), when the first wait
  // began and when the last one returned (steady-clock nanoseconds, 0: never).
  // The process set reads them to tell which operations its rank is blocked
  // on, so ranks blocked on different operations become an error, not a hang.
  std::atomic<int> waiters{0};
  std::atomic<int64_t> first_wait_ns{0};
  std::atomic<int64_t> last_wait_end_ns{0};
  // When the operation was enqueued (steady-clock nanoseconds). Set before the
  // engine sees the handle and never changed.
  int64_t enqueued_ns = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> completed{false};
  size_t remaining = 0;  // tensors not yet completed (engine thread only)
  bool failed = false;
  hvd::Error error{hvd::ErrorCode::kInternal, ""};  // when failed
  int32_t last_joined_rank = -1;

  ~hvd_handle();
};

namespace hvd {

// Drops one reference; frees the handle at zero.
void handle_unref(hvd_handle* handle);
// Records the outcome of tensor `index` (error == nullptr for success). When
// it was the last outstanding tensor, wakes waiters, runs the callback and
// drops the engine's reference.
void handle_complete_tensor(hvd_handle* handle, size_t index, const Error* error);
// Fails every tensor that is still outstanding.
void handle_fail_all(hvd_handle* handle, const Error& error);
// Blocks until completion or timeout; returns false on timeout. Drives the
// engine on this thread for a while first (see Driver).
bool handle_wait(hvd_handle* handle, double timeout_seconds);
// Whether a caller has been blocked on `handle` for at least `min_seconds`
// by `now_ns` (steady clock). Waits that come back in quick succession (a
// binding waiting in slices, to run signal handlers) count as one. An
// operation nobody waits on but whose completion callback someone awaits
// (TensorFlow's graph kernels) counts once it has been pending for
// `unwaited_callback_seconds`: nothing says whether its rank is blocked on
// it, so only an operation pending that long is taken to hold its rank.
bool handle_blocked_since(const hvd_handle* handle, int64_t now_ns, double min_seconds,
                          double unwaited_callback_seconds);
int64_t steady_now_ns();


}  // namespace hvd
