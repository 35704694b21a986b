// core_calls.h - how hvd-tensorflow's C++ talks to hvd-core's C ABI, shared
// by the TF kernels (tf_ops.cc), the XLA FFI handlers (xla_ffi_handlers.cc)
// and the tf2xla kernels (xla_tf2xla_kernels.cc): describing a host or CUDA
// buffer as a DLTensor, filling hvd_tensor_args, the engine's tensor names,
// waiting for a collective on the calling thread, and turning an hvd_error into the
// TF status Horovod raises. Nothing here knows TensorFlow's or XLA's tensor
// types, so each library links it without the other's headers.
#ifndef HVD_TENSORFLOW_CORE_CALLS_H_
#define HVD_TENSORFLOW_CORE_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "hvd/c_api.h"

namespace hvd_tf {

struct ErrorDeleter {
  void operator()(hvd_error* e) const { hvd_error_destroy(e); }
};
using ErrorPtr = std::unique_ptr<hvd_error, ErrorDeleter>;

struct HandleDeleter {
  void operator()(hvd_handle* h) const { hvd_handle_release(h); }
};
using HandlePtr = std::unique_ptr<hvd_handle, HandleDeleter>;

// Where the op type goes in a status made from an engine error. The TF
// kernels keep Horovod's messages: only failures of the job (Unknown) start
// with the op type, which Horovod's elastic code looks for. XLA errors
// surface from inside a compiled program, away from any graph node, so every
// message of the XLA paths names the op.
enum class OpTypePrefix { kUnknownOnly, kEveryMessage };

// The status Horovod's TF API raises for `e`: ranks disagreeing or a missing
// hvd.init() -> FailedPrecondition; bad input on this rank (also a duplicate
// in-flight name or an unsupported request) -> InvalidArgument; a dead peer
// or a shut-down engine -> Unknown. Takes ownership of `e`; nullptr is OK.
absl::Status StatusFromError(hvd_error* e, std::string_view op_type, OpTypePrefix prefix);

// Where a kernel's tensors live: host memory, or one CUDA device's memory
// with the stream the framework queued their producers on (the engine's
// GPU work waits for that stream's work queued so far).
struct Placement {
  DLDevice device{kDLCPU, 0};
  void* stream = nullptr;
};

// A DLTensor over a compact row-major buffer, with the shape it points to.
struct TensorView {
  std::vector<int64_t> shape;
  DLTensor tensor{};

  // Not copyable once set: `tensor.shape` points into `shape`.
  TensorView() = default;
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;
  TensorView(TensorView&& other) noexcept;
  TensorView& operator=(TensorView&&) = delete;

  void Set(void* data, DLDataType dtype, const int64_t* dims, size_t ndim, DLDevice device = DLDevice{kDLCPU, 0});
};

// Messages: the parts streamed one after another, and a sequence joined by
// `sep`. (Not absl::StrCat: this file and the XLA handlers also build
// against an Abseil whose string_view is not std::string_view, for the
// JAX-driven check of the handlers.)
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename Seq>
std::string Join(const Seq& seq, const char* sep) {
  std::ostringstream out;
  const char* between = "";
  for (const auto& v : seq) {
    out << between << v;
    between = sep;
  }
  return out.str();
}

// One tensor of an enqueue: `output` may be null (the engine allocates).
hvd_tensor_args TensorArgs(const DLTensor* input, DLTensor* output, std::string_view name);

// A group's members are "<name>_<i>" (a group of one keeps the plain name);
// the TF kernels and both XLA paths name them alike, so ranks match.
std::string MemberName(std::string_view name, size_t i, size_t count);

// The engine's key for a node: its name, or only the last '/'-separated part
// with ignore_name_scope (Horovod's rule).
std::string EngineName(std::string_view node_name, bool ignore_name_scope);

// What a completed collective reports besides its tensors, copied out of the
// handle before it is released (the engine's arrays die with it).
struct Outcome {
  int32_t last_joined_rank = -1;         // join
  std::vector<int64_t> received_splits;  // alltoall (tensor 0)
};

// Enqueues `args` and waits for it on this thread, which then drives the
// engine itself (HVD_ENQUEUE_CALLER_WAITS); root_rank is global. Errors
// name `op_type` in every message (see OpTypePrefix).
absl::Status EnqueueAndWait(std::string_view op_type, hvd_enqueue_args* args, Outcome* outcome = nullptr);

// Where the engine puts results whose shape it negotiates: buffers whose
// shapes were fixed beforehand (XLA's result buffers, the compile-time shape
// exchange). A negotiated shape that differs is refused, and the call fails
// instead of writing past a buffer.
struct ResultTargets {
  struct Target {
    void* data;
    std::vector<int64_t> shape;
  };
  std::vector<Target> targets;
  std::string mismatch;  // set by AllocIntoTargets when a shape differs
};

// hvd_enqueue_args::alloc over a ResultTargets (alloc_ctx).
int32_t AllocIntoTargets(void* ctx, size_t index, int32_t ndim, const int64_t* shape, DLDataType, void** data);

}  // namespace hvd_tf

#endif  // HVD_TENSORFLOW_CORE_CALLS_H_
