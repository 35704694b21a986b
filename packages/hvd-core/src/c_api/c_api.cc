// c_api.cc - the exported C functions. Each one is wrapped in HVD_API_BEGIN /
// HVD_API_END so no C++ exception crosses the boundary: errors become
// hvd_error objects. Argument structs are read up to the caller's
// struct_size, so callers built against an older minor keep working.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "adasum/adasum.h"
#include "common/dtype.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/handle.h"
#include "gpu/gpu_plugin_loader.h"
#include "hvd/c_api.h"

struct hvd_error {
  hvd_error_code code;
  std::string message;
  std::string tensor;          // hvd_error_get_tensor_name
  std::vector<int32_t> ranks;  // hvd_error_get_ranks
};

namespace hvd {
namespace {

// Returned when even the error object cannot be allocated; never freed.
hvd_error g_out_of_memory{HVD_ERROR_INTERNAL, "out of memory", "", {}};

hvd_error* make_error(hvd_error_code code, const std::string& message, const std::string& tensor = {},
                      const std::vector<int>& ranks = {}) {
  try {
    std::vector<int32_t> sorted(ranks.begin(), ranks.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    return new hvd_error{code, message, tensor, std::move(sorted)};
  } catch (...) {
    return &g_out_of_memory;
  }
}

// The compile-time check that each STRUCT_SIZE macro names its last field:
// only trailing padding may lie beyond it.
#define HVD_CHECK_STRUCT_SIZE(type, size_macro) \
  static_assert(sizeof(type) >= (size_macro) && sizeof(type) - (size_macro) < alignof(type), "update " #size_macro)
HVD_CHECK_STRUCT_SIZE(hvd_init_args, HVD_INIT_ARGS_STRUCT_SIZE);
HVD_CHECK_STRUCT_SIZE(hvd_topology, HVD_TOPOLOGY_STRUCT_SIZE);
HVD_CHECK_STRUCT_SIZE(hvd_process_set_info, HVD_PROCESS_SET_INFO_STRUCT_SIZE);
HVD_CHECK_STRUCT_SIZE(hvd_tensor_args, HVD_TENSOR_ARGS_STRUCT_SIZE);
HVD_CHECK_STRUCT_SIZE(hvd_enqueue_args, HVD_ENQUEUE_ARGS_STRUCT_SIZE);
HVD_CHECK_STRUCT_SIZE(hvd_result, HVD_RESULT_STRUCT_SIZE);

// Reads a field only when the caller's struct is large enough to hold it.
#define HVD_FIELD(ptr, field, fallback) \
  ((ptr)->struct_size >= offsetof(std::remove_pointer_t<decltype(ptr)>, field) + sizeof((ptr)->field) ? (ptr)->field : (fallback))

// Writes an output field only when the caller's struct holds it: a caller
// built against an older minor passes a smaller struct_size, and fields
// appended since are not its memory.
#define HVD_SET(ptr, field, value)                                                                         \
  do {                                                                                                      \
    if ((ptr)->struct_size >= offsetof(std::remove_pointer_t<decltype(ptr)>, field) + sizeof((ptr)->field)) \
      (ptr)->field = (value);                                                                               \
  } while (0)

// The output structs as ABI 1.0 defined them: the least a caller may pass.
// Fields appended in later minors are written only when they fit (HVD_SET).
constexpr size_t kTopology10Size = offsetof(hvd_topology, is_homogeneous) + sizeof(int32_t);
constexpr size_t kProcessSetInfo10Size = offsetof(hvd_process_set_info, ranks_capacity) + sizeof(size_t);
constexpr size_t kResult10Size = offsetof(hvd_result, last_joined_rank) + sizeof(int32_t);

void require_struct(size_t struct_size, size_t minimum, const char* what) {
  if (struct_size < minimum) {
    throw_error(ErrorCode::kInvalidArgument, std::string(what) + ".struct_size is " + std::to_string(struct_size) +
                                                 "; set it with the header's STRUCT_SIZE macro");
  }
}

std::vector<int64_t> shape_of(const DLTensor& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.ndim);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Checks that a DLTensor is something the engine can read in place;
// returns where it lives.
// `what()` names the tensor in errors; called only for one, so a valid
// tensor costs no string building.
template <class What>
Device check_tensor(const DLTensor* t, const What& what) {
  if (t == nullptr) throw_error(ErrorCode::kInvalidArgument, what() + " is NULL");
  Device device = Device::kCpu;
  if (t->device.device_type == kDLCUDA) {
    const GpuSupport& gpu = gpu_support();
    if (gpu.plugin == nullptr) throw_error(ErrorCode::kUnsupported, what() + " is a CUDA tensor, but " + gpu.why);
    if (t->device.device_id < 0 || t->device.device_id >= gpu.device_count) {
      throw_error(ErrorCode::kInvalidArgument, what() + " is on CUDA device " + std::to_string(t->device.device_id) +
                                                   ", but this process sees " + std::to_string(gpu.device_count));
    }
    device = Device::kCuda;
  } else if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
    throw_error(ErrorCode::kUnsupported,
                what() + " is on DLPack device type " + std::to_string(t->device.device_type) +
                    "; hvd-core moves CPU and CUDA memory (copy the tensor to one of those first)");
  }
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) throw_error(ErrorCode::kInvalidArgument, what() + " has no shape");
  const DataType dtype = dtype_from_dlpack(t->dtype);  // throws for unsupported types, naming them
  // The byte size must fit int64, counting a zero dimension as 1: the
  // engine multiplies dimensions in any order to size buffers and messages,
  // and a wrapped product would describe a small tensor over a caller's
  // huge (or absent) memory. No real tensor comes near this bound.
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  bool empty = false;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) throw_error(ErrorCode::kInvalidArgument, what() + " has a negative dimension");
    empty = empty || t->shape[i] == 0;
    if (__builtin_mul_overflow(bytes, std::max<int64_t>(t->shape[i], 1), &bytes)) {
      throw_error(ErrorCode::kInvalidArgument, what() + " has shape " + shape_str(shape_of(*t)) +
                                                   ", more bytes than a 64-bit size can count");
    }
  }
  const int64_t n = empty ? 0 : bytes / static_cast<int64_t>(dtype_size(dtype));
  // An empty tensor has no layout to check.
  if (t->strides != nullptr && n != 0) {
    int64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expected) {
        throw_error(ErrorCode::kInvalidArgument,
                    what() + " is not contiguous (row-major compact); make a contiguous copy first");
      }
      expected *= t->shape[i];
    }
  }
  if (t->data == nullptr && n > 0) throw_error(ErrorCode::kInvalidArgument, what() + " has no data pointer");
  return device;
}

std::string device_string(const DLTensor& t) {
  return t.device.device_type == kDLCUDA ? "CUDA device " + std::to_string(t.device.device_id) : "the CPU";
}

// "0, 2, 4" - at most the first 16 ranks, so a big process set stays readable.
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) out += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

// Entry i of args->tensors. The array's element size is the caller's
// sizeof(hvd_tensor_args), which grows when a minor appends a field, so the
// library steps by the caller's struct_size (rounded up to the struct's
// alignment: that is sizeof), never by its own sizeof.
const hvd_tensor_args* tensor_args_at(const hvd_enqueue_args* args, size_t i) {
  static_assert(alignof(hvd_tensor_args) == alignof(size_t), "appended fields keep size_t's alignment");
  if (args->tensors == nullptr || i >= args->num_tensors) return nullptr;
  const size_t size = args->tensors[0].struct_size;
  require_struct(size, HVD_TENSOR_ARGS_STRUCT_SIZE, "hvd_tensor_args");
  constexpr size_t align = alignof(hvd_tensor_args);
  const size_t stride = (size + align - 1) / align * align;
  const auto* entry =
      reinterpret_cast<const hvd_tensor_args*>(reinterpret_cast<const char*>(args->tensors) + i * stride);
  if (entry->struct_size != size) {
    throw_error(ErrorCode::kInvalidArgument, "hvd_enqueue_args.tensors[" + std::to_string(i) + "] has struct_size " +
                                                 std::to_string(entry->struct_size) + " but tensors[0] has " +
                                                 std::to_string(size) + ": every entry must have the same");
  }
  return entry;
}

hvd_handle* build_handle(const hvd_enqueue_args* args, ProcessSetRuntime& set, int world_size) {
  require_struct(args->struct_size, offsetof(hvd_enqueue_args, num_tensors) + sizeof(size_t), "hvd_enqueue_args");
  auto collective = static_cast<Collective>(args->collective);
  if (args->collective < HVD_ALLREDUCE || args->collective > HVD_JOIN) {
    throw_error(ErrorCode::kInvalidArgument, "unknown collective " + std::to_string(args->collective));
  }
  const bool tensorless = collective == Collective::kBarrier || collective == Collective::kJoin;
  if (args->reduce_op < HVD_OP_AVERAGE || args->reduce_op > HVD_OP_PRODUCT) {
    throw_error(ErrorCode::kInvalidArgument, "unknown reduce op " + std::to_string(args->reduce_op));
  }
  if (collective == Collective::kReducescatter && args->reduce_op == HVD_OP_ADASUM) {
    throw_error(ErrorCode::kUnsupported, "reducescatter does not support op=Adasum; use Average or Sum");
  }
  const uint32_t flags = HVD_FIELD(args, flags, 0u);
  // The engine works with the root's position in the process set.
  int32_t root_member = args->root_rank;
  if (collective == Collective::kBroadcast && (flags & HVD_ENQUEUE_ROOT_RANK_GLOBAL) != 0) {
    const auto& ranks = set.ranks();
    auto it = std::find(ranks.begin(), ranks.end(), args->root_rank);
    if (args->root_rank < 0 || args->root_rank >= world_size) {
      throw_error(ErrorCode::kInvalidArgument, "broadcast root_rank " + std::to_string(args->root_rank) +
                                                   " is out of range: the job has " + std::to_string(world_size) +
                                                   " ranks");
    }
    if (it == ranks.end()) {
      throw_error(ErrorCode::kInvalidArgument,
                  "broadcast root_rank " + std::to_string(args->root_rank) + " is not a member of process set " +
                      std::to_string(set.id()) + " (ranks " + rank_list(ranks) + "); root_rank is a global rank");
    }
    root_member = static_cast<int32_t>(it - ranks.begin());
  } else if (collective == Collective::kBroadcast && (root_member < 0 || root_member >= set.size())) {
    throw_error(ErrorCode::kInvalidArgument,
                "broadcast root_rank " + std::to_string(args->root_rank) + " is out of range: process set " +
                    std::to_string(set.id()) + " has " + std::to_string(set.size()) + " ranks");
  }
  // A zeroed struct scales nothing; callers that mean 0 say so with the flag.
  const bool factors_as_given = (flags & HVD_ENQUEUE_SCALE_FACTORS_AS_GIVEN) != 0;
  double prescale = args->prescale_factor == 0.0 && !factors_as_given ? 1.0 : args->prescale_factor;
  double postscale = args->postscale_factor == 0.0 && !factors_as_given ? 1.0 : args->postscale_factor;
  if (!std::isfinite(prescale) || !std::isfinite(postscale)) {
    throw_error(ErrorCode::kInvalidArgument, "prescale_factor and postscale_factor must be finite");
  }
  size_t n = tensorless ? 1 : args->num_tensors;
  if (!tensorless && (n == 0 || args->tensors == nullptr)) {
    throw_error(ErrorCode::kInvalidArgument, "no tensors given to enqueue");
  }
  std::unique_ptr<hvd_handle> h(new hvd_handle());
  h->tensors.reserve(n);
  h->process_set_id = set.id();
  h->alloc = HVD_FIELD(args, alloc, nullptr);
  h->alloc_ctx = HVD_FIELD(args, alloc_ctx, nullptr);
  h->on_done = HVD_FIELD(args, on_done, nullptr);
  h->on_done_ctx = HVD_FIELD(args, on_done_ctx, nullptr);
  h->caller_waits = (flags & HVD_ENQUEUE_CALLER_WAITS) != 0;
  h->enqueued_ns = steady_now_ns();
  if ((flags & HVD_ENQUEUE_SUBMITTER_BLOCKED) != 0) {
    // A waiter that never leaves: once complete the operation is no longer
    // looked at, so nothing needs to take the mark back.
    h->first_wait_ns.store(steady_now_ns(), std::memory_order_relaxed);
    h->waiters.store(1, std::memory_order_relaxed);
  }
  for (size_t i = 0; i < n; ++i) {
    TensorSlot slot;
    RequestMeta& m = slot.meta;
    m.collective = collective;
    m.reduce_op = args->reduce_op;
    m.root_rank = root_member;
    m.prescale = prescale;
    m.postscale = postscale;
    const hvd_tensor_args* ta = tensor_args_at(args, i);
    if (ta != nullptr && ta->name != nullptr && ta->name_len > 0) {
      if (ta->name_len > hvd::kMaxTensorNameBytes) {
        throw_error(ErrorCode::kInvalidArgument,
                    std::string(collective_name(collective)) + " tensor name of " + std::to_string(ta->name_len) +
                        " bytes is longer than the " + std::to_string(hvd::kMaxTensorNameBytes) + " bytes allowed");
      }
      m.name.assign(ta->name, ta->name_len);
    }
    if (tensorless) {
      m.dtype = DataType::kUInt8;
      h->tensors.push_back(std::move(slot));
      continue;
    }
    auto what = [&m, collective] {
      return std::string(collective_name(collective)) + " input" + (m.name.empty() ? "" : " '" + m.name + "'");
    };
    m.device = check_tensor(ta->input, what);
    m.dtype = dtype_from_dlpack(ta->input->dtype);
    m.shape = shape_of(*ta->input);
    slot.input = static_cast<const char*>(ta->input->data) + ta->input->byte_offset;
    slot.device_id = m.device == Device::kCuda ? ta->input->device.device_id : 0;
    if (i > 0 && (m.device != h->tensors[0].meta.device || slot.device_id != h->tensors[0].device_id)) {
      throw_error(ErrorCode::kInvalidArgument, what() + " is on " + device_string(*ta->input) +
                                                   " but the first tensor of the group is not: a group's tensors "
                                                   "must all be on one device");
    }
    if (collective == Collective::kAllgather || collective == Collective::kAlltoall ||
        collective == Collective::kReducescatter) {
      if (m.shape.empty()) {
        throw_error(ErrorCode::kInvalidArgument, what() + " is a scalar; " + collective_name(collective) +
                                                     " needs a tensor with at least one dimension");
      }
    }
    if (m.dtype == DataType::kBool && (collective == Collective::kAllreduce || collective == Collective::kReducescatter) &&
        (args->reduce_op == HVD_OP_AVERAGE)) {
      throw_error(ErrorCode::kUnsupported, what() + " has dtype bool, which cannot be averaged; use op=Sum (logical or), Min or Max");
    }
    if (collective == Collective::kAllreduce && args->reduce_op == HVD_OP_ADASUM && !adasum_supports(m.dtype)) {
      throw_error(ErrorCode::kInvalidArgument, what() + " has dtype " + dtype_name(m.dtype) +
                                                   "; op=Adasum needs float16, bfloat16, float32 or float64");
    }
    if (ta->output != nullptr) {
      if (collective != Collective::kAllreduce && collective != Collective::kBroadcast) {
        throw_error(ErrorCode::kInvalidArgument, std::string("an output tensor can only be given for allreduce and broadcast, not ") +
                                                     collective_name(collective));
      }
      check_tensor(ta->output, [collective] { return std::string(collective_name(collective)) + " output"; });
      if (ta->output->device.device_type != ta->input->device.device_type ||
          (m.device == Device::kCuda && ta->output->device.device_id != ta->input->device.device_id)) {
        throw_error(ErrorCode::kInvalidArgument, what() + " is on " + device_string(*ta->input) +
                                                     " but its output tensor is on " + device_string(*ta->output) +
                                                     "; both must be on the same device");
      }
      if (shape_of(*ta->output) != m.shape || dtype_from_dlpack(ta->output->dtype) != m.dtype) {
        throw_error(ErrorCode::kInvalidArgument, what() + ": the output tensor " + shape_str(shape_of(*ta->output)) +
                                                     " does not match the input " + shape_str(m.shape) + " in shape or dtype");
      }
      slot.output = static_cast<char*>(ta->output->data) + ta->output->byte_offset;
    }
    if (collective == Collective::kAlltoall) {
      int64_t dim0 = m.shape[0];
      if (ta->splits != nullptr) {
        if (ta->num_splits != static_cast<size_t>(set.size())) {
          throw_error(ErrorCode::kInvalidArgument, what() + ": splits has " + std::to_string(ta->num_splits) +
                                                       " entries, but the process set has " + std::to_string(set.size()) + " ranks");
        }
        int64_t sum = 0;
        for (size_t s = 0; s < ta->num_splits; ++s) {
          if (ta->splits[s] < 0) throw_error(ErrorCode::kInvalidArgument, what() + ": splits must not be negative");
          sum += ta->splits[s];
        }
        if (sum != dim0) {
          throw_error(ErrorCode::kInvalidArgument, what() + ": splits add up to " + std::to_string(sum) +
                                                       " but the first dimension is " + std::to_string(dim0));
        }
        slot.splits.assign(ta->splits, ta->splits + ta->num_splits);
      } else if (dim0 % set.size() != 0) {
        throw_error(ErrorCode::kInvalidArgument, what() + ": without splits, the first dimension (" + std::to_string(dim0) +
                                                     ") must divide evenly by the number of ranks (" + std::to_string(set.size()) + ")");
      }
    }
    h->tensors.push_back(std::move(slot));
  }
  if (!tensorless && h->tensors[0].meta.device == Device::kCuda) {
    // The framework may still be computing the inputs on its stream: hvd's
    // own stream will wait for this point of it, the host never does.
    const int device = h->tensors[0].device_id;
    hvd_gpu_status status{};
    h->ready_event = gpu_support().plugin->event_record(device, HVD_FIELD(args, device_stream, nullptr), &status);
    if (h->ready_event == nullptr) throw_gpu_status(status, "enqueue of a CUDA tensor");
    note_cuda_device(device);
  }
  return h.release();
}

}  // namespace
}  // namespace hvd

#define HVD_API_BEGIN try {
#define HVD_API_END                                                                        \
  }                                                                                        \
  catch (const hvd::Error& e) {                                                            \
    return hvd::make_error(static_cast<hvd_error_code>(e.code()), e.what(), e.tensor(), e.ranks()); \
  }                                                                                        \
  catch (const std::bad_alloc&) {                                                          \
    return hvd::make_error(HVD_ERROR_INTERNAL, "out of memory");                          \
  }                                                                                        \
  catch (const std::exception& e) {                                                        \
    return hvd::make_error(HVD_ERROR_INTERNAL, std::string("internal error: ") + e.what()); \
  }                                                                                        \
  catch (...) {                                                                            \
    return hvd::make_error(HVD_ERROR_INTERNAL, "internal error: unknown exception");      \
  }                                                                                        \
  return nullptr;

using hvd::Engine;

extern "C" {

hvd_error* hvd_get_gpu_info(hvd_gpu_info* info) {
  HVD_API_BEGIN
  if (info == nullptr) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "hvd_get_gpu_info: info is NULL");
  hvd::require_struct(info->struct_size, HVD_GPU_INFO_STRUCT_SIZE, "hvd_gpu_info");
  const hvd::GpuSupport& gpu = hvd::gpu_support_with_nccl();
  // One message, built once: it must outlive the call.
  static const std::string message = [&gpu] {
    return (gpu.plugin != nullptr ? gpu.description : gpu.why) +
           (gpu.nccl_version > 0 ? "; NCCL " + std::to_string(gpu.nccl_version)
                                 : "; NCCL unavailable: " + gpu.nccl_error);
  }();
  info->cuda_built = gpu.library != nullptr ? 1 : 0;
  info->cuda_available = gpu.plugin != nullptr ? 1 : 0;
  info->device_count = gpu.device_count;
  info->nccl_version = gpu.nccl_version;
  info->message = message.c_str();
  info->message_len = message.size();
  HVD_API_END
}

hvd_error_code hvd_error_get_code(const hvd_error* error) { return error ? error->code : HVD_SUCCESS; }

const char* hvd_error_get_message(const hvd_error* error, size_t* length) {
  if (error == nullptr) {
    if (length) *length = 0;
    return "";
  }
  if (length) *length = error->message.size();
  return error->message.c_str();
}

const char* hvd_error_get_tensor_name(const hvd_error* error, size_t* length) {
  if (length) *length = error != nullptr ? error->tensor.size() : 0;
  return error != nullptr ? error->tensor.c_str() : "";
}

size_t hvd_error_get_ranks(const hvd_error* error, int32_t* ranks, size_t capacity) {
  if (error == nullptr) return 0;
  for (size_t i = 0; i < error->ranks.size() && i < capacity && ranks != nullptr; ++i) ranks[i] = error->ranks[i];
  return error->ranks.size();
}

void hvd_error_destroy(hvd_error* error) {
  if (error != nullptr && error != &hvd::g_out_of_memory) delete error;
}

void hvd_get_api_version(int32_t* major, int32_t* minor) {
  if (major) *major = HVD_API_MAJOR;
  if (minor) *minor = HVD_API_MINOR;
}

const char* hvd_get_version_string(void) { return HVD_VERSION_STRING; }

hvd_error* hvd_init(const hvd_init_args* args) {
  HVD_API_BEGIN
  if (args != nullptr) hvd::require_struct(args->struct_size, sizeof(size_t), "hvd_init_args");
  Engine::init(args);
  HVD_API_END
}

hvd_error* hvd_shutdown(void) {
  HVD_API_BEGIN
  Engine::shutdown();
  HVD_API_END
}

hvd_error* hvd_get_async_error(void) {
  HVD_API_BEGIN
  if (std::shared_ptr<const hvd::Error> why = Engine::failure()) throw *why;
  HVD_API_END
}

hvd_error* hvd_abort(const char* reason, size_t reason_len) {
  HVD_API_BEGIN
  if (reason == nullptr && reason_len > 0) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "reason is NULL");
  Engine::abort(reason_len > 0 ? std::string(reason, reason_len) : std::string());
  HVD_API_END
}

int32_t hvd_is_initialized(void) {
  try {
    return Engine::initialized() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

hvd_error* hvd_get_topology(hvd_topology* out) {
  HVD_API_BEGIN
  if (out == nullptr) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "topology is NULL");
  hvd::require_struct(out->struct_size, hvd::kTopology10Size, "hvd_topology");
  const auto& t = Engine::get()->topology();
  HVD_SET(out, rank, t.rank);
  HVD_SET(out, size, t.size);
  HVD_SET(out, local_rank, t.local_rank);
  HVD_SET(out, local_size, t.local_size);
  HVD_SET(out, cross_rank, t.cross_rank);
  HVD_SET(out, cross_size, t.cross_size);
  HVD_SET(out, is_homogeneous, t.homogeneous ? 1 : 0);
  HVD_API_END
}

hvd_error* hvd_add_process_set(const int32_t* ranks, size_t num_ranks, int32_t* process_set_id) {
  HVD_API_BEGIN
  if (ranks == nullptr && num_ranks > 0) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "ranks is NULL");
  std::vector<int> r(ranks, ranks + num_ranks);
  int32_t id = Engine::get()->add_process_set(std::move(r));
  if (process_set_id) *process_set_id = id;
  HVD_API_END
}

hvd_error* hvd_remove_process_set(int32_t process_set_id) {
  HVD_API_BEGIN
  Engine::get()->remove_process_set(process_set_id);
  HVD_API_END
}

hvd_error* hvd_get_process_set_info(hvd_process_set_info* info) {
  HVD_API_BEGIN
  if (info == nullptr) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "info is NULL");
  hvd::require_struct(info->struct_size, hvd::kProcessSetInfo10Size, "hvd_process_set_info");
  auto set = Engine::get()->process_set(info->process_set_id);
  HVD_SET(info, rank, set->member());
  HVD_SET(info, size, set->size());
  HVD_SET(info, fast_lane_calls, set->fast_lane_calls());
  HVD_SET(info, request_batches, set->request_batches());
  if (info->ranks != nullptr) {
    for (size_t i = 0; i < set->ranks().size() && i < info->ranks_capacity; ++i) info->ranks[i] = set->ranks()[i];
  }
  HVD_API_END
}

hvd_error* hvd_get_process_set_ids(int32_t* ids, size_t capacity, size_t* count) {
  HVD_API_BEGIN
  auto all = Engine::get()->process_set_ids();
  for (size_t i = 0; i < all.size() && i < capacity && ids != nullptr; ++i) ids[i] = all[i];
  if (count) *count = all.size();
  HVD_API_END
}

hvd_error* hvd_enqueue(const hvd_enqueue_args* args, hvd_handle** handle) {
  HVD_API_BEGIN
  if (args == nullptr || handle == nullptr) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "hvd_enqueue: args and handle must not be NULL");
  }
  *handle = nullptr;
  // Before any field is read: a caller's struct may end right after struct_size.
  hvd::require_struct(args->struct_size, offsetof(hvd_enqueue_args, num_tensors) + sizeof(size_t),
                      "hvd_enqueue_args");
  auto engine = Engine::get();
  auto set = engine->process_set(args->process_set_id);
  if (set->member() < 0) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument,
                     "rank " + std::to_string(engine->topology().rank) + " is not a member of process set " +
                         std::to_string(args->process_set_id));
  }
  hvd_handle* h = hvd::build_handle(args, *set, engine->topology().size);
  try {
    set->enqueue(h);
  } catch (...) {
    delete h;
    throw;
  }
  *handle = h;
  HVD_API_END
}

hvd_error* hvd_enqueue_wait(const hvd_enqueue_args* args, double timeout_seconds, hvd_handle** handle) {
  hvd_error* enqueue_error = hvd_enqueue(args, handle);
  if (enqueue_error != nullptr) return enqueue_error;
  hvd_handle* h = *handle;
  HVD_API_BEGIN
  if (!hvd::handle_wait(h, timeout_seconds)) return nullptr;  // in flight: the caller has *handle
  *handle = nullptr;
  if (!h->failed) {
    hvd::handle_unref(h);
    return nullptr;
  }
  const hvd::Error error = h->error;
  hvd::handle_unref(h);
  throw error;
  HVD_API_END
}

int32_t hvd_handle_poll(const hvd_handle* handle) {
  return handle != nullptr && handle->completed.load(std::memory_order_acquire) ? 1 : 0;
}

hvd_error* hvd_handle_wait(hvd_handle* handle, double timeout_seconds) {
  HVD_API_BEGIN
  if (handle == nullptr) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "handle is NULL");
  if (!hvd::handle_wait(handle, timeout_seconds)) {
    hvd::throw_error(hvd::ErrorCode::kTimeout, "the operation did not complete within " +
                                                   std::to_string(timeout_seconds) + " s; it is still in flight");
  }
  if (handle->failed) throw handle->error;
  HVD_API_END
}

hvd_error* hvd_handle_get_result(hvd_handle* handle, hvd_result* result) {
  HVD_API_BEGIN
  if (handle == nullptr || result == nullptr) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "handle or result is NULL");
  hvd::require_struct(result->struct_size, hvd::kResult10Size, "hvd_result");
  if (!handle->completed.load(std::memory_order_acquire)) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "the operation has not completed; wait for it first");
  }
  if (handle->failed) throw handle->error;
  if (result->tensor_index >= handle->tensors.size()) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "tensor_index " + std::to_string(result->tensor_index) +
                                                           " is out of range");
  }
  auto& slot = handle->tensors[result->tensor_index];
  DLManagedTensor* output = nullptr;
  if (slot.owned_result != nullptr && !slot.result_taken) {
    output = slot.owned_result;
    slot.result_taken = true;
  }
  HVD_SET(result, output, output);
  HVD_SET(result, received_splits, slot.received_splits.empty() ? nullptr : slot.received_splits.data());
  HVD_SET(result, num_received_splits, slot.received_splits.size());
  HVD_SET(result, last_joined_rank, handle->last_joined_rank);
  HVD_API_END
}

void hvd_handle_release(hvd_handle* handle) {
  if (handle != nullptr) hvd::handle_unref(handle);
}

hvd_error* hvd_start_timeline(const char* path, size_t path_len, int32_t mark_cycles) {
  HVD_API_BEGIN
  if (path == nullptr || path_len == 0) hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "timeline path is empty");
  Engine::get()->start_timeline(std::string(path, path_len), mark_cycles != 0);
  HVD_API_END
}

hvd_error* hvd_autotune_gradient_bucket(int64_t configured_bytes, int64_t total_bytes, int64_t* bytes,
                                        int32_t* state) {
  HVD_API_BEGIN
  if (bytes == nullptr || state == nullptr) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "bytes or state is NULL");
  }
  if (configured_bytes < 0 || total_bytes < 0) {
    hvd::throw_error(hvd::ErrorCode::kInvalidArgument, "configured_bytes and total_bytes must not be negative");
  }
  *state = Engine::get()->process_set(0)->autotune_gradient_bucket(configured_bytes, total_bytes, bytes);
  HVD_API_END
}

hvd_error* hvd_stop_timeline(void) {
  HVD_API_BEGIN
  Engine::get()->stop_timeline();
  HVD_API_END
}

}  // extern "C"
