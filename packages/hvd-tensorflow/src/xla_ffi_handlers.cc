// xla_ffi_handlers.cc - the run-time half of Horovod's XLA support: XLA FFI
// handlers that serve the custom calls the tf2xla kernels
// (xla_tf2xla_kernels.cc) emit inside tf.function(jit_compile=True)
// programs: platform "Host" always, platform "CUDA" too when TensorFlow is a
// CUDA build (HVD_TF_GPU).
//
// XLA's runtime calls a handler with the operand and result buffers and the
// attributes decoded from the call's backend_config; the handler enqueues one
// engine collective (a group for the grouped ops) with
// HVD_ENQUEUE_CALLER_WAITS and waits for it on the calling thread, writing
// straight into XLA's result buffers. On a GPU the buffers are device memory
// and the handler also passes XLA's stream: the engine's GPU plane orders its
// work after what XLA queued before the call, and the handler returns once
// the results are written, so the kernels XLA queues next read them. Result
// shapes were fixed at compile time: a negotiated result of any other shape
// (a rank that recompiled while another reused its program) is refused
// rather than written.
//
// HVD_XLA_FFI_EXPORTED_HANDLERS builds the handlers as exported C symbols
// instead of registering them with TensorFlow's XLA (any XLA runtime can then
// register them itself, e.g. JAX's jax.ffi.register_ffi_target in the GPU
// check of tools/gpu_check.sh).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core_calls.h"
#include "hvd/c_api.h"
#include "xla/ffi/api/ffi.h"
#include "xla_custom_calls.h"

#ifndef HVD_XLA_FFI_EXPORTED_HANDLERS
namespace xla::ffi {
// Defined in xla/ffi/ffi_api.h (exported by libtensorflow_cc.so.2). That
// header drags in XLA's HLO internals; the one declaration is all we need.
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi
#endif

namespace hvd_tf {
namespace {

namespace ffi = ::xla::ffi;

ffi::Error ToFfiError(const absl::Status& s) {
  return ffi::Error(static_cast<XLA_FFI_Error_Code>(s.code()), std::string(s.message()));
}

// XLA element types -> DLPack, for the dtypes the Horovod ops accept.
bool ToDLDataType(ffi::DataType t, DLDataType* out) {
  auto set = [&](uint8_t code, uint8_t bits) {
    *out = DLDataType{code, bits, 1};
    return true;
  };
  switch (t) {
    case ffi::DataType::PRED: return set(kDLBool, 8);
    case ffi::DataType::S8: return set(kDLInt, 8);
    case ffi::DataType::S16: return set(kDLInt, 16);
    case ffi::DataType::S32: return set(kDLInt, 32);
    case ffi::DataType::S64: return set(kDLInt, 64);
    case ffi::DataType::U8: return set(kDLUInt, 8);
    case ffi::DataType::U16: return set(kDLUInt, 16);
    case ffi::DataType::U32: return set(kDLUInt, 32);
    case ffi::DataType::U64: return set(kDLUInt, 64);
    case ffi::DataType::F16: return set(kDLFloat, 16);
    case ffi::DataType::F32: return set(kDLFloat, 32);
    case ffi::DataType::F64: return set(kDLFloat, 64);
    case ffi::DataType::BF16: return set(kDLBfloat, 16);
    default: return false;
  }
}

// A DLTensor over an XLA buffer. XLA hands custom calls compact row-major
// buffers (the kernels pin the default layout), so no strides are needed.
struct DLView : TensorView {
  absl::Status Init(const ffi::AnyBuffer& buf, DLDevice device, std::string_view op_type) {
    DLDataType dtype;
    if (!ToDLDataType(buf.element_type(), &dtype)) {
      return absl::InvalidArgumentError(Cat(
          op_type, ": unsupported element type ", static_cast<int>(buf.element_type())));
    }
    auto dims = buf.dimensions();
    std::vector<int64_t> dims_vec(dims.begin(), dims.end());
    Set(buf.untyped_data(), dtype, dims_vec.data(), dims_vec.size(), device);
    return absl::OkStatus();
  }
};

struct CollectiveAttrs {
  std::string_view op_type;  // the TF op, for messages
  std::string_view name;
  int32_t collective = HVD_ALLREDUCE;
  int32_t reduce_op = HVD_OP_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root_rank = 0;
  int32_t process_set_id = 0;
  // Alltoall: rows sent to each rank, and the rows from each rank that the
  // program was compiled for.
  ffi::Span<const int64_t> splits;
  ffi::Span<const int64_t> received_splits;
};

// Runs one (possibly grouped) collective over the custom call's operands and
// results, pairwise.
ffi::Error RunCollective(const Placement& where, const CollectiveAttrs& a, ffi::RemainingArgs ins,
                         ffi::RemainingRets outs) {
  const size_t n = ins.size();
  if (outs.size() != n || n == 0) {
    return ffi::Error::InvalidArgument(
        Cat(a.op_type, ": ", n, " operands but ", outs.size(), " results"));
  }
  const bool alltoall = a.collective == HVD_ALLTOALL;
  const bool engine_allocates = alltoall || a.collective == HVD_ALLGATHER || a.collective == HVD_REDUCESCATTER;
  std::vector<DLView> src(n), dst(n);
  std::vector<std::string> names(n);
  std::vector<hvd_tensor_args> tensors(n);
  ResultTargets targets;
  for (size_t i = 0; i < n; ++i) {
    auto in = ins.get<ffi::AnyBuffer>(i);
    auto out = outs.get<ffi::AnyBuffer>(i);
    if (in.has_error()) return in.error();
    if (out.has_error()) return out.error();
    if (auto s = src[i].Init(*in, where.device, a.op_type); !s.ok()) return ToFfiError(s);
    if (auto s = dst[i].Init(**out, where.device, a.op_type); !s.ok()) return ToFfiError(s);
    names[i] = MemberName(a.name, i, n);
    tensors[i] = TensorArgs(&src[i].tensor, engine_allocates ? nullptr : &dst[i].tensor, names[i]);
    if (alltoall) {
      tensors[i].splits = a.splits.begin();
      tensors[i].num_splits = a.splits.size();
    }
    targets.targets.push_back({dst[i].tensor.data, dst[i].shape});
  }
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  args.collective = a.collective;
  args.process_set_id = a.process_set_id;
  args.reduce_op = a.reduce_op;
  args.prescale_factor = a.prescale;
  args.postscale_factor = a.postscale;
  args.root_rank = a.root_rank;
  args.tensors = tensors.data();
  args.num_tensors = n;
  args.device_stream = where.stream;
  if (engine_allocates) {
    args.alloc = &AllocIntoTargets;
    args.alloc_ctx = &targets;
  }
  Outcome outcome;
  absl::Status s = EnqueueAndWait(a.op_type, &args, alltoall ? &outcome : nullptr);
  if (!targets.mismatch.empty()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      Cat(a.op_type, ": '", a.name, "': ", targets.mismatch));
  }
  // received_splits is a compile-time constant of the program: rows may add
  // up to the compiled total and still come from other ranks than compiled.
  if (s.ok() && alltoall &&
      outcome.received_splits != std::vector<int64_t>(a.received_splits.begin(), a.received_splits.end())) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      Cat(a.op_type, ": '", a.name, "': received splits [",
                                   Join(outcome.received_splits, ","),
                                   "] but this XLA program was compiled for [", Join(a.received_splits, ","),
                                   "]: a rank changed its splits without every rank recompiling"));
  }
  return ToFfiError(s);
}

ffi::Error AllreduceImpl(const Placement& where, ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                         std::string_view name, int32_t reduce_op, double prescale, double postscale,
                         int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_ALLREDUCE;
  a.reduce_op = reduce_op;
  a.prescale = prescale;
  a.postscale = postscale;
  a.process_set_id = process_set_id;
  return RunCollective(where, a, ins, outs);
}

ffi::Error ReducescatterImpl(const Placement& where, ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                             std::string_view name, int32_t reduce_op, double prescale, double postscale,
                             int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_REDUCESCATTER;
  a.reduce_op = reduce_op;
  a.prescale = prescale;
  a.postscale = postscale;
  a.process_set_id = process_set_id;
  return RunCollective(where, a, ins, outs);
}

ffi::Error AllgatherImpl(const Placement& where, ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                         std::string_view name, int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_ALLGATHER;
  a.process_set_id = process_set_id;
  return RunCollective(where, a, ins, outs);
}

ffi::Error BroadcastImpl(const Placement& where, ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                         std::string_view name, int32_t root_rank, int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_BROADCAST;
  a.root_rank = root_rank;
  a.process_set_id = process_set_id;
  return RunCollective(where, a, ins, outs);
}

ffi::Error AlltoallImpl(const Placement& where, ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                        std::string_view name, int32_t process_set_id, ffi::Span<const int64_t> splits,
                        ffi::Span<const int64_t> received_splits) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_ALLTOALL;
  a.process_set_id = process_set_id;
  a.splits = splits;
  a.received_splits = received_splits;
  return RunCollective(where, a, ins, outs);
}

// Join carries no tensor (the engine names it); its one result is the last
// rank to join.
ffi::Error JoinImpl(ffi::ResultBufferR0<ffi::DataType::S32> out, std::string_view op_type, std::string_view,
                    int32_t process_set_id) {
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  args.collective = HVD_JOIN;
  args.process_set_id = process_set_id;
  Outcome outcome;
  if (auto s = EnqueueAndWait(op_type, &args, &outcome); !s.ok()) return ToFfiError(s);
  *out->typed_data() = outcome.last_joined_rank;
  return ffi::Error::Success();
}

// On a GPU the result is device memory, which this library (no CUDA of its
// own) cannot write: refused with a way out rather than run.
ffi::Error JoinOnGpu(void*, int32_t, ffi::ResultBufferR0<ffi::DataType::S32>, std::string_view op_type,
                     std::string_view, int32_t) {
  return ffi::Error(ffi::ErrorCode::kUnimplemented,
                    Cat(op_type, ": hvd.join() inside an XLA program on a GPU is not supported; call it "
                                 "outside jit_compile"));
}

// The operands, results and attributes of each target's calls, bound after
// the handler's context. Every target's calls carry op_type and name; all but
// join take their tensors as operands and results.
#define HVD_TENSORS_BINDING(START) \
  START.RemainingArgs().RemainingRets().Attr<std::string_view>("op_type").Attr<std::string_view>("name")
#define HVD_REDUCE_BINDING(START)                 \
  HVD_TENSORS_BINDING(START)                      \
      .Attr<int32_t>("reduce_op")                 \
      .Attr<double>("prescale_factor")            \
      .Attr<double>("postscale_factor")           \
      .Attr<int32_t>("process_set_id")
#define HVD_ALLGATHER_BINDING(START) HVD_TENSORS_BINDING(START).Attr<int32_t>("process_set_id")
#define HVD_BROADCAST_BINDING(START) \
  HVD_TENSORS_BINDING(START).Attr<int32_t>("root_rank").Attr<int32_t>("process_set_id")
#define HVD_ALLTOALL_BINDING(START)               \
  HVD_TENSORS_BINDING(START)                      \
      .Attr<int32_t>("process_set_id")            \
      .Attr<ffi::Span<const int64_t>>("splits")   \
      .Attr<ffi::Span<const int64_t>>("received_splits")
#define HVD_JOIN_BINDING(START)                   \
  START.Ret<ffi::BufferR0<ffi::DataType::S32>>()  \
      .Attr<std::string_view>("op_type")          \
      .Attr<std::string_view>("name")             \
      .Attr<int32_t>("process_set_id")

// Two handlers per collective: on the host, and on a CUDA device, where XLA
// also passes its stream and the device's ordinal.
#define HVD_CUDA_CONTEXT ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()
#define HVD_XLA_HANDLERS(NAME, IMPL, BINDING)                                                   \
  XLA_FFI_DEFINE_HANDLER(k##NAME##Host, ([](auto... a) { return IMPL(Placement{}, a...); }),   \
                         BINDING(ffi::Ffi::Bind()));                                           \
  XLA_FFI_DEFINE_HANDLER(k##NAME##Cuda, ([](void* stream, int32_t device, auto... a) {         \
                           return IMPL(Placement{DLDevice{kDLCUDA, device}, stream}, a...);    \
                         }),                                                                   \
                         BINDING(HVD_CUDA_CONTEXT))

HVD_XLA_HANDLERS(Allreduce, AllreduceImpl, HVD_REDUCE_BINDING);
HVD_XLA_HANDLERS(Reducescatter, ReducescatterImpl, HVD_REDUCE_BINDING);
HVD_XLA_HANDLERS(Allgather, AllgatherImpl, HVD_ALLGATHER_BINDING);
HVD_XLA_HANDLERS(Broadcast, BroadcastImpl, HVD_BROADCAST_BINDING);
HVD_XLA_HANDLERS(Alltoall, AlltoallImpl, HVD_ALLTOALL_BINDING);
XLA_FFI_DEFINE_HANDLER(kJoinHost, JoinImpl, HVD_JOIN_BINDING(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER(kJoinCuda, JoinOnGpu, HVD_JOIN_BINDING(HVD_CUDA_CONTEXT));

#ifndef HVD_XLA_FFI_EXPORTED_HANDLERS
// Every target on one platform: PLATFORM is XLA's name, Suffix the handlers'.
#define HVD_XLA_REGISTER(PLATFORM, Suffix)                                                        \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllreduceTarget, PLATFORM, kAllreduce##Suffix);         \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kReducescatterTarget, PLATFORM, kReducescatter##Suffix); \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllgatherTarget, PLATFORM, kAllgather##Suffix);         \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kBroadcastTarget, PLATFORM, kBroadcast##Suffix);         \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAlltoallTarget, PLATFORM, kAlltoall##Suffix);           \
  XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kJoinTarget, PLATFORM, kJoin##Suffix)
HVD_XLA_REGISTER("Host", Host);
#if HVD_TF_GPU
HVD_XLA_REGISTER("CUDA", Cuda);
#endif
#endif

}  // namespace
}  // namespace hvd_tf

#ifdef HVD_XLA_FFI_EXPORTED_HANDLERS
// hvd_xla_<target>_host and hvd_xla_<target>_cuda for each target.
#define HVD_XLA_EXPORT(target, Name)                                                                          \
  extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* hvd_xla_##target##_host(XLA_FFI_CallFrame* f) { \
    return hvd_tf::k##Name##Host(f);                                                                           \
  }                                                                                                            \
  extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* hvd_xla_##target##_cuda(XLA_FFI_CallFrame* f) { \
    return hvd_tf::k##Name##Cuda(f);                                                                           \
  }
HVD_XLA_EXPORT(allreduce, Allreduce)
HVD_XLA_EXPORT(reducescatter, Reducescatter)
HVD_XLA_EXPORT(allgather, Allgather)
HVD_XLA_EXPORT(broadcast, Broadcast)
HVD_XLA_EXPORT(alltoall, Alltoall)
HVD_XLA_EXPORT(join, Join)
#endif
