// fuzz_c_api.cc - the C ABI's argument checks driven by arbitrary structs:
// hvd_enqueue with fuzzed hvd_enqueue_args / hvd_tensor_args / DLTensor
// descriptors (struct_size values, counts, shapes, strides, dtypes, devices,
// splits, names, scale factors, flags), and the struct_size handling of the
// query functions, on the single-rank engine hvd_init() starts without a
// launcher's environment. Only the library's own sources are linked in.
//
// The target is an honest but careless caller: every pointer it passes
// points at as much memory as the fields next to it say (a struct of
// struct_size bytes, `ndim` dimensions, `num_splits` splits, `name_len`
// bytes, a data buffer of the bytes the shape and dtype need), and every
// value in that memory is arbitrary. Each struct lives in a heap block of
// exactly the bytes its struct_size says, so a read past it is an ASan report.
// Properties: no crash, no sanitizer report, every refused call returns an
// error with a known code and a message; every accepted one completes.
#include <fuzzer/FuzzedDataProvider.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "hvd/c_api.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_c_api: %s\n", what);
  std::abort();
}

// Checks a returned error and destroys it; returns whether there was one.
bool check_error(hvd_error* e) {
  if (e == nullptr) return false;
  hvd_error_code code = hvd_error_get_code(e);
  if (code < HVD_ERROR_INVALID_ARGUMENT || code > HVD_ERROR_UNSUPPORTED) fail("error with an unknown code");
  size_t len = 0;
  const char* msg = hvd_error_get_message(e, &len);
  if (msg == nullptr || len == 0 || msg[len] != '\0') fail("error without a message");
  const char* tensor = hvd_error_get_tensor_name(e, &len);
  if (tensor == nullptr) fail("error without a tensor name string");
  int32_t ranks[4];
  hvd_error_get_ranks(e, ranks, 4);
  hvd_error_destroy(e);
  return true;
}

// Heap blocks that live until the end of one input.
struct Arena {
  std::vector<std::unique_ptr<char[]>> blocks;
  template <typename T = char>
  T* alloc(size_t bytes) {
    blocks.emplace_back(new char[bytes == 0 ? 1 : bytes]);
    std::memset(blocks.back().get(), 0, bytes == 0 ? 1 : bytes);
    return reinterpret_cast<T*>(blocks.back().get());
  }
};

// A struct_size around `real`: often right, sometimes short, zero, long.
size_t pick_struct_size(FuzzedDataProvider& in, size_t real) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return 0;
    case 1: return in.ConsumeIntegralInRange<size_t>(1, real);
    case 2: return real + in.ConsumeIntegralInRange<size_t>(1, 64);
    default: return real;
  }
}

int32_t pick_i32(FuzzedDataProvider& in, int32_t lo, int32_t hi) {
  return in.ConsumeBool() ? in.ConsumeIntegral<int32_t>() : in.ConsumeIntegralInRange<int32_t>(lo, hi);
}

int64_t pick_dim(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return in.ConsumeIntegral<int64_t>();
    case 1: return int64_t(1) << in.ConsumeIntegralInRange<int>(16, 62);
    default: return in.ConsumeIntegralInRange<int64_t>(0, 5);
  }
}

double pick_factor(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: return 0.0;
    case 1: return std::numeric_limits<double>::infinity();
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return in.ConsumeFloatingPoint<double>();
    case 4: return 0.5;
    default: return 1.0;
  }
}

DLDataType pick_dtype(FuzzedDataProvider& in) {
  static const DLDataType kValid[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                      {kDLInt, 8, 1},    {kDLInt, 32, 1},   {kDLInt, 64, 1},   {kDLUInt, 8, 1},
                                      {kDLUInt, 1, 1},   {kDLBool, 8, 1}};
  if (in.ConsumeIntegralInRange<int>(0, 7) != 0) {
    return kValid[in.ConsumeIntegralInRange<size_t>(0, sizeof(kValid) / sizeof(kValid[0]) - 1)];
  }
  DLDataType t;
  t.code = in.ConsumeIntegral<uint8_t>();
  t.bits = in.ConsumeIntegral<uint8_t>();
  t.lanes = in.ConsumeBool() ? 1 : in.ConsumeIntegral<uint16_t>();
  return t;
}

// Bytes a tensor of this shape and dtype needs, or -1 when the library
// cannot describe it (unknown dtype, negative or overflowing size).
int64_t bytes_needed(const DLTensor& t) {
  size_t item;
  try {
    item = hvd::dtype_size(hvd::dtype_from_dlpack(t.dtype));
  } catch (const hvd::Error&) {
    return -1;
  }
  int64_t n = static_cast<int64_t>(item);
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0 || __builtin_mul_overflow(n, t.shape[i], &n)) return -1;
  }
  return n;
}

constexpr int64_t kMaxDataBytes = 1 << 16;

DLTensor* make_tensor(FuzzedDataProvider& in, Arena& arena) {
  auto* t = arena.alloc<DLTensor>(sizeof(DLTensor));
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: t->device.device_type = kDLCUDA; break;
    case 1: t->device.device_type = kDLCUDAHost; break;
    case 2: t->device.device_type = static_cast<DLDeviceType>(in.ConsumeIntegral<int32_t>()); break;
    default: t->device.device_type = kDLCPU; break;
  }
  t->device.device_id = pick_i32(in, -1, 2);
  t->ndim = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? -in.ConsumeIntegralInRange<int32_t>(1, 1 << 30)
                                                       : in.ConsumeIntegralInRange<int32_t>(0, 5);
  if (t->ndim > 0 && in.ConsumeIntegralInRange<int>(0, 15) != 0) {
    t->shape = arena.alloc<int64_t>(sizeof(int64_t) * t->ndim);
    for (int32_t i = 0; i < t->ndim; ++i) t->shape[i] = pick_dim(in);
  }
  t->dtype = pick_dtype(in);
  if (t->ndim > 0 && t->shape != nullptr && in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    t->strides = arena.alloc<int64_t>(sizeof(int64_t) * t->ndim);
    int64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
      t->strides[i] = in.ConsumeBool() ? expected : in.ConsumeIntegral<int64_t>();
      if (__builtin_mul_overflow(expected, t->shape[i], &expected)) expected = 1;
    }
  }
  int64_t need = t->ndim >= 0 && (t->ndim == 0 || t->shape != nullptr) ? bytes_needed(*t) : -1;
  if (need >= 0 && need <= kMaxDataBytes && in.ConsumeIntegralInRange<int>(0, 15) != 0) {
    // byte_offset in whole elements, so the elements stay aligned.
    size_t item = hvd::dtype_size(hvd::dtype_from_dlpack(t->dtype));
    t->byte_offset = item * in.ConsumeIntegralInRange<uint64_t>(0, 3);
    char* data = arena.alloc(static_cast<size_t>(need) + t->byte_offset);
    for (int64_t i = 0; i < need; ++i) data[t->byte_offset + i] = static_cast<char>(in.ConsumeIntegral<uint8_t>());
    t->data = data;
  }
  return t;
}

struct AllocState {
  Arena* arena;
  bool refuse;
};

// Global for the same reason as done_calls below: the context may be absent.
AllocState alloc_state;

int32_t alloc_output(void*, size_t, int32_t ndim, const int64_t* shape, DLDataType dtype, void** data) {
  AllocState* state = &alloc_state;
  if (state->refuse) return 1;
  DLTensor t{};
  t.ndim = ndim;
  t.shape = const_cast<int64_t*>(shape);
  t.dtype = dtype;
  int64_t need = bytes_needed(t);
  if (need < 0 || need > (int64_t(1) << 24)) fail("alloc asked for an impossible result");
  *data = state->arena->alloc(static_cast<size_t>(need));
  return 0;
}

// Counted in a global: a struct_size that ends between on_done and
// on_done_ctx gives the callback a NULL context, as the ABI says.
// The engine marks a handle complete (waking hvd_handle_wait) before it
// calls on_done, so the count is atomic and awaited below.
std::atomic<int> done_calls{0};
void on_done(void*, hvd_handle*) { done_calls.fetch_add(1); }

void fuzz_enqueue(FuzzedDataProvider& in, Arena& arena) {
  hvd_enqueue_args full{};
  full.collective = pick_i32(in, -1, 7);
  full.process_set_id = pick_i32(in, -1, 1);
  full.reduce_op = pick_i32(in, -1, 6);
  full.root_rank = pick_i32(in, -1, 1);
  full.prescale_factor = pick_factor(in);
  full.postscale_factor = pick_factor(in);
  full.flags = in.ConsumeBool() ? in.ConsumeIntegral<uint32_t>()
                                : in.ConsumeIntegralInRange<uint32_t>(0, 15) | HVD_ENQUEUE_CALLER_WAITS;
  alloc_state = AllocState{&arena, in.ConsumeIntegralInRange<int>(0, 7) == 0};
  done_calls = 0;
  if (in.ConsumeBool()) {
    full.alloc = alloc_output;
    full.alloc_ctx = &alloc_state;
  }
  if (in.ConsumeBool()) {
    full.on_done = on_done;
    full.on_done_ctx = &alloc_state;
  }

  // The tensor array: entries `stride` bytes apart, each struct_size long.
  size_t num_tensors = in.ConsumeIntegralInRange<size_t>(0, 3);
  size_t entry_size = pick_struct_size(in, HVD_TENSOR_ARGS_STRUCT_SIZE);
  size_t stride = (entry_size + alignof(hvd_tensor_args) - 1) / alignof(hvd_tensor_args) * alignof(hvd_tensor_args);
  bool tensors_null = in.ConsumeIntegralInRange<int>(0, 15) == 0;
  if (tensors_null) {
    full.num_tensors = in.ConsumeBool() ? in.ConsumeIntegral<size_t>() : num_tensors;
  } else if (num_tensors > 0) {
    char* array = arena.alloc(std::max(stride * num_tensors, sizeof(size_t)));
    for (size_t i = 0; i < num_tensors; ++i) {
      hvd_tensor_args ta{};
      // Entry 0's struct_size is the element size the array was laid out
      // with; a later entry may claim another (which the library refuses),
      // unless the entries overlap (struct_size 0).
      ta.struct_size = i > 0 && stride > 0 && in.ConsumeIntegralInRange<int>(0, 15) == 0
                           ? pick_struct_size(in, HVD_TENSOR_ARGS_STRUCT_SIZE)
                           : entry_size;
      ta.input = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : make_tensor(in, arena);
      switch (in.ConsumeIntegralInRange<int>(0, 5)) {
        case 0: ta.output = const_cast<DLTensor*>(ta.input); break;
        case 1: ta.output = make_tensor(in, arena); break;
        default: break;
      }
      if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
        ta.num_splits = in.ConsumeIntegralInRange<size_t>(0, 3);
        auto* splits = arena.alloc<int64_t>(sizeof(int64_t) * ta.num_splits);
        for (size_t s = 0; s < ta.num_splits; ++s) splits[s] = pick_dim(in);
        ta.splits = splits;
      }
      switch (in.ConsumeIntegralInRange<int>(0, 15)) {
        case 0: break;
        case 1: {  // longer than the library allows
          ta.name_len = 64 * 1024 + in.ConsumeIntegralInRange<size_t>(0, 2);
          char* name = arena.alloc(ta.name_len);
          std::memset(name, 'n', ta.name_len);
          ta.name = name;
          break;
        }
        default: {
          std::string name = in.ConsumeRandomLengthString(32);
          char* copy = arena.alloc(name.size());
          std::memcpy(copy, name.data(), name.size());
          ta.name = copy;
          ta.name_len = name.size();
          break;
        }
      }
      std::memcpy(array + i * stride, &ta, std::min(stride, sizeof(ta)));
      reinterpret_cast<hvd_tensor_args*>(array + i * stride)->struct_size = ta.struct_size;
    }
    full.tensors = reinterpret_cast<const hvd_tensor_args*>(array);
    full.num_tensors = num_tensors;
  }

  // The enqueue args themselves, in a block of exactly struct_size bytes.
  full.struct_size = pick_struct_size(in, HVD_ENQUEUE_ARGS_STRUCT_SIZE);
  const size_t block = std::max(full.struct_size, sizeof(size_t));
  auto* args = arena.alloc<hvd_enqueue_args>(block);
  std::memcpy(args, &full, std::min(block, sizeof(full)));

  hvd_handle* handle = nullptr;
  hvd_error* err = hvd_enqueue(in.ConsumeIntegralInRange<int>(0, 31) == 0 ? nullptr : args, &handle);
  if (check_error(err)) {
    if (handle != nullptr) fail("a refused enqueue returned a handle");
    return;
  }
  if (handle == nullptr) fail("an accepted enqueue returned no handle");
  hvd_error* waited = hvd_handle_wait(handle, 60.0);
  if (waited != nullptr && hvd_error_get_code(waited) == HVD_ERROR_TIMEOUT) fail("an accepted operation hung");
  const bool failed = check_error(waited);
  if (!hvd_handle_poll(handle)) fail("a waited-on handle is not complete");
  if (!failed) {
    for (size_t i = 0; i < 4; ++i) {
      const size_t result_size = pick_struct_size(in, HVD_RESULT_STRUCT_SIZE);
      auto* result = arena.alloc<hvd_result>(std::max(result_size, sizeof(size_t) * 2));
      result->struct_size = result_size;
      result->tensor_index = in.ConsumeBool() ? i : in.ConsumeIntegral<size_t>();
      if (check_error(hvd_handle_get_result(handle, result))) continue;
      if (result->output != nullptr && result->output->deleter != nullptr) result->output->deleter(result->output);
    }
  }
  hvd_handle_release(handle);
  const bool has_on_done = args->struct_size >= offsetof(hvd_enqueue_args, on_done) + sizeof(hvd_done_fn);
  if (full.on_done != nullptr && has_on_done) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (done_calls.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    if (done_calls.load() != 1) fail("on_done was not called exactly once");
  }
}

void fuzz_queries(FuzzedDataProvider& in, Arena& arena) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {
      size_t size = pick_struct_size(in, HVD_TOPOLOGY_STRUCT_SIZE);
      auto* t = arena.alloc<hvd_topology>(std::max(size, sizeof(size_t)));
      t->struct_size = size;
      check_error(hvd_get_topology(t));
      break;
    }
    case 1: {
      size_t size = pick_struct_size(in, HVD_PROCESS_SET_INFO_STRUCT_SIZE);
      auto* info = arena.alloc<hvd_process_set_info>(std::max(size, sizeof(size_t)));
      hvd_process_set_info full{};
      full.struct_size = size;
      full.process_set_id = pick_i32(in, -1, 1);
      full.ranks_capacity = in.ConsumeIntegralInRange<size_t>(0, 2);
      full.ranks = full.ranks_capacity == 0 && in.ConsumeBool() ? nullptr
                                                                 : arena.alloc<int32_t>(4 * full.ranks_capacity);
      std::memcpy(info, &full, std::min(std::max(size, sizeof(size_t)), sizeof(full)));
      check_error(hvd_get_process_set_info(info));
      break;
    }
    case 2: {
      size_t capacity = in.ConsumeIntegralInRange<size_t>(0, 2);
      auto* ids = capacity == 0 && in.ConsumeBool() ? nullptr : arena.alloc<int32_t>(4 * capacity);
      size_t count = 0;
      check_error(hvd_get_process_set_ids(ids, capacity, in.ConsumeBool() ? &count : nullptr));
      break;
    }
    default: {
      size_t n = in.ConsumeIntegralInRange<size_t>(0, 3);
      auto* ranks = arena.alloc<int32_t>(4 * n);
      for (size_t i = 0; i < n; ++i) ranks[i] = pick_i32(in, -1, 2);
      int32_t id = -1;
      if (!check_error(hvd_add_process_set(n == 0 && in.ConsumeBool() ? nullptr : ranks, n, &id))) {
        check_error(hvd_remove_process_set(id));
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("HOROVOD_LOG_LEVEL", "fatal", 1);
  if (hvd_error* e = hvd_init(nullptr)) {
    size_t len;
    std::fprintf(stderr, "hvd_init: %s\n", hvd_error_get_message(e, &len));
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Arena arena;
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    fuzz_queries(in, arena);
  } else {
    fuzz_enqueue(in, arena);
  }
  return 0;
}
