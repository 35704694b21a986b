// xla_ops.cc - Horovod collectives inside XLA programs
// (tf.function(jit_compile=True)) on the CPU: tf2xla kernels that lower
// HorovodAllreduce, HorovodAllgather, HorovodBroadcast, HorovodReducescatter
// (and their grouped forms), HorovodBroadcastInplaceResource, HorovodAlltoall
// and HorovodJoin to typed-FFI
// custom calls, and the XLA FFI handlers ("Host" platform) that run those
// custom calls through hvd-core's C ABI.
//
// The op definitions belong to libhvd_tensorflow.so, which mpi_ops loads
// before this library; this file registers only XLA kernels and handlers.
//
// Data flow: at compile time a kernel reads the node's attributes and emits
//   custom-call(target="hvd_allreduce", backend_config={op_type = ..., name = ..., ...})
// with has_side_effect, so XLA never merges or drops it. At run time XLA's
// CPU runtime calls the handler with the operand/result buffers and the
// attributes decoded from that dictionary; the handler enqueues one engine
// collective (a group for the grouped ops) with HVD_ENQUEUE_CALLER_WAITS and
// waits for it on the XLA thread, writing straight into XLA's result buffers.
//
// Result shapes must be static. Reducescatter's block is computable locally.
// Allgather's and alltoall's first dimensions depend on the other ranks, so
// their kernels exchange first dimensions (alltoall: splits) through the
// engine while compiling (every rank compiles the same function at its first
// call with new input shapes), and the handlers refuse a negotiated result of
// any other shape at run time. Alltoall's splits must therefore be known at
// compile time; its received_splits output becomes a constant.

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvd/c_api.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"  // XlaOpKernel
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"  // REGISTER_XLA_OP
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace xla::ffi {
// Defined in xla/ffi/ffi_api.h (exported by libtensorflow_cc.so.2). That
// header drags in XLA's HLO internals; the one declaration is all we need.
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace hvd_tf_xla {
namespace {

namespace ffi = ::xla::ffi;

// Custom-call targets; the kernels and the handlers below must agree.
constexpr char kAllreduceTarget[] = "hvd_allreduce";
constexpr char kReducescatterTarget[] = "hvd_reducescatter";
constexpr char kAllgatherTarget[] = "hvd_allgather";
constexpr char kBroadcastTarget[] = "hvd_broadcast";
constexpr char kAlltoallTarget[] = "hvd_alltoall";
constexpr char kJoinTarget[] = "hvd_join";

// ---------------------------------------------------------------------------
// Engine access
// ---------------------------------------------------------------------------

struct ErrorDeleter {
  void operator()(hvd_error* e) const { hvd_error_destroy(e); }
};
using ErrorPtr = std::unique_ptr<hvd_error, ErrorDeleter>;

struct HandleDeleter {
  void operator()(hvd_handle* h) const { hvd_handle_release(h); }
};
using HandlePtr = std::unique_ptr<hvd_handle, HandleDeleter>;

std::string ErrorMessage(const hvd_error* e) {
  size_t len = 0;
  const char* msg = hvd_error_get_message(e, &len);
  return std::string(msg, len);
}

// The same classes the non-XLA kernels raise (see the contract): ranks
// disagreeing or a missing hvd.init() -> FailedPrecondition, a dead peer or a
// shut-down engine -> Unknown (Horovod's elastic code keys on it), a bad
// argument on this rank -> InvalidArgument.
absl::StatusCode StatusCodeFor(hvd_error_code code) {
  switch (code) {
    case HVD_ERROR_PRECONDITION:
    case HVD_ERROR_NOT_INITIALIZED:
      return absl::StatusCode::kFailedPrecondition;
    case HVD_ERROR_INVALID_ARGUMENT:
    case HVD_ERROR_DUPLICATE_NAME:
    case HVD_ERROR_UNSUPPORTED:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kUnknown;
  }
}

// Every message starts with the op type, as the non-XLA kernels' messages do.
absl::Status ToStatus(std::string_view op_type, const hvd_error* e) {
  return absl::Status(StatusCodeFor(hvd_error_get_code(e)),
                      absl::StrCat(op_type, ": ", ErrorMessage(e)));
}

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
struct DLView {
  std::vector<int64_t> shape;
  DLTensor tensor{};

  absl::Status Init(const ffi::AnyBuffer& buf, std::string_view op_type) {
    auto dims = buf.dimensions();
    shape.assign(dims.begin(), dims.end());
    if (!ToDLDataType(buf.element_type(), &tensor.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_type, ": unsupported element type ", static_cast<int>(buf.element_type())));
    }
    tensor.data = buf.untyped_data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = static_cast<int32_t>(shape.size());
    tensor.shape = shape.data();
    tensor.strides = nullptr;
    tensor.byte_offset = 0;
    return absl::OkStatus();
  }
};

// What a completed collective reports besides its tensors, copied out of the
// handle before it is released (the engine's arrays die with it).
struct Outcome {
  int32_t last_joined_rank = -1;          // join
  std::vector<int64_t> received_splits;  // alltoall (tensor 0)
};

// Enqueues `args` and waits for it on this thread (which then drives the
// engine itself: HVD_ENQUEUE_CALLER_WAITS).
absl::Status EnqueueAndWait(std::string_view op_type, hvd_enqueue_args* args, Outcome* outcome = nullptr) {
  args->struct_size = HVD_ENQUEUE_ARGS_STRUCT_SIZE;
  // root_rank is Horovod's global rank, also on process sets.
  args->flags |= HVD_ENQUEUE_CALLER_WAITS | HVD_ENQUEUE_ROOT_RANK_GLOBAL;
  hvd_handle* raw = nullptr;
  if (ErrorPtr e{hvd_enqueue(args, &raw)}) return ToStatus(op_type, e.get());
  HandlePtr handle(raw);
  if (ErrorPtr e{hvd_handle_wait(handle.get(), -1.0)}) return ToStatus(op_type, e.get());
  if (outcome != nullptr) {
    hvd_result r = HVD_RESULT_INIT;
    if (ErrorPtr e{hvd_handle_get_result(handle.get(), &r)}) return ToStatus(op_type, e.get());
    outcome->last_joined_rank = r.last_joined_rank;
    outcome->received_splits.assign(r.received_splits, r.received_splits + r.num_received_splits);
  }
  return absl::OkStatus();
}

hvd_tensor_args TensorArgs(const DLTensor* input, DLTensor* output, std::string_view name) {
  hvd_tensor_args t = HVD_TENSOR_ARGS_INIT;
  t.input = input;
  t.output = output;
  t.name = name.data();
  t.name_len = name.size();
  return t;
}

// ---------------------------------------------------------------------------
// FFI handlers (run time)
// ---------------------------------------------------------------------------

// A group's members are "<name>_<i>" (a group of one keeps the plain name),
// as the non-XLA kernels name them; the engine negotiates a group as one unit.
std::string MemberName(std::string_view name, size_t i, size_t count) {
  return count > 1 ? absl::StrCat(name, "_", i) : std::string(name);
}

// Where the engine puts results whose shape it negotiates (allgather,
// alltoall, reducescatter): straight into XLA's result buffers, whose shapes were
// fixed at compile time. If the negotiated shape differs (a rank changed a
// first dimension and recompiled while another reused its program), the
// allocation is refused and the call fails instead of writing past a buffer.
struct ResultTargets {
  struct Target {
    void* data;
    std::vector<int64_t> shape;
  };
  std::vector<Target> targets;
  std::string mismatch;  // set by Alloc when a shape differs
};

int32_t AllocIntoTargets(void* ctx, size_t index, int32_t ndim, const int64_t* shape, DLDataType,
                         void** data) {
  auto* t = static_cast<ResultTargets*>(ctx);
  if (index >= t->targets.size()) return 1;
  const std::vector<int64_t>& expected = t->targets[index].shape;
  std::vector<int64_t> got(shape, shape + ndim);
  if (got != expected) {
    t->mismatch = absl::StrCat("the negotiated result of tensor ", index, " has shape [", absl::StrJoin(got, ","),
                               "] but this XLA program was compiled for [", absl::StrJoin(expected, ","),
                               "]: a rank changed a first dimension without every rank recompiling");
    return 1;
  }
  *data = t->targets[index].data;
  return 0;
}

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
ffi::Error RunCollective(const CollectiveAttrs& a, ffi::RemainingArgs ins, ffi::RemainingRets outs) {
  const size_t n = ins.size();
  if (outs.size() != n || n == 0) {
    return ffi::Error::InvalidArgument(
        absl::StrCat(a.op_type, ": ", n, " operands but ", outs.size(), " results"));
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
    if (auto s = src[i].Init(*in, a.op_type); !s.ok()) return ToFfiError(s);
    if (auto s = dst[i].Init(**out, a.op_type); !s.ok()) return ToFfiError(s);
    names[i] = MemberName(a.name, i, n);
    tensors[i] = TensorArgs(&src[i].tensor, engine_allocates ? nullptr : &dst[i].tensor, names[i]);
    if (alltoall) {
      tensors[i].splits = a.splits.begin();
      tensors[i].num_splits = a.splits.size();
    }
    targets.targets.push_back({dst[i].tensor.data, dst[i].shape});
  }
  hvd_enqueue_args args{};
  args.collective = a.collective;
  args.process_set_id = a.process_set_id;
  args.reduce_op = a.reduce_op;
  args.prescale_factor = a.prescale;
  args.postscale_factor = a.postscale;
  args.root_rank = a.root_rank;
  args.tensors = tensors.data();
  args.num_tensors = n;
  if (engine_allocates) {
    args.alloc = &AllocIntoTargets;
    args.alloc_ctx = &targets;
  }
  Outcome outcome;
  absl::Status s = EnqueueAndWait(a.op_type, &args, alltoall ? &outcome : nullptr);
  if (!targets.mismatch.empty()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      absl::StrCat(a.op_type, ": '", a.name, "': ", targets.mismatch));
  }
  // received_splits is a compile-time constant of the program: rows may add
  // up to the compiled total and still come from other ranks than compiled.
  if (s.ok() && alltoall &&
      outcome.received_splits != std::vector<int64_t>(a.received_splits.begin(), a.received_splits.end())) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      absl::StrCat(a.op_type, ": '", a.name, "': received splits [",
                                   absl::StrJoin(outcome.received_splits, ","),
                                   "] but this XLA program was compiled for [", absl::StrJoin(a.received_splits, ","),
                                   "]: a rank changed its splits without every rank recompiling"));
  }
  return ToFfiError(s);
}

ffi::Error AllreduceImpl(ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
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
  return RunCollective(a, ins, outs);
}

ffi::Error ReducescatterImpl(ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
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
  return RunCollective(a, ins, outs);
}

ffi::Error AllgatherImpl(ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                         std::string_view name, int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_ALLGATHER;
  a.process_set_id = process_set_id;
  return RunCollective(a, ins, outs);
}

ffi::Error BroadcastImpl(ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                         std::string_view name, int32_t root_rank, int32_t process_set_id) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_BROADCAST;
  a.root_rank = root_rank;
  a.process_set_id = process_set_id;
  return RunCollective(a, ins, outs);
}

ffi::Error AlltoallImpl(ffi::RemainingArgs ins, ffi::RemainingRets outs, std::string_view op_type,
                        std::string_view name, int32_t process_set_id, ffi::Span<const int64_t> splits,
                        ffi::Span<const int64_t> received_splits) {
  CollectiveAttrs a;
  a.op_type = op_type;
  a.name = name;
  a.collective = HVD_ALLTOALL;
  a.process_set_id = process_set_id;
  a.splits = splits;
  a.received_splits = received_splits;
  return RunCollective(a, ins, outs);
}

// Join carries no tensor (the engine names it); its one result is the last
// rank to join.
ffi::Error JoinImpl(ffi::ResultBufferR0<ffi::DataType::S32> out, std::string_view op_type, std::string_view,
                    int32_t process_set_id) {
  hvd_enqueue_args args{};
  args.collective = HVD_JOIN;
  args.process_set_id = process_set_id;
  Outcome outcome;
  if (auto s = EnqueueAndWait(op_type, &args, &outcome); !s.ok()) return ToFfiError(s);
  *out->typed_data() = outcome.last_joined_rank;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kAllreduceHandler, AllreduceImpl,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("reduce_op")
                           .Attr<double>("prescale_factor")
                           .Attr<double>("postscale_factor")
                           .Attr<int32_t>("process_set_id"));

XLA_FFI_DEFINE_HANDLER(kReducescatterHandler, ReducescatterImpl,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("reduce_op")
                           .Attr<double>("prescale_factor")
                           .Attr<double>("postscale_factor")
                           .Attr<int32_t>("process_set_id"));

XLA_FFI_DEFINE_HANDLER(kAllgatherHandler, AllgatherImpl,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("process_set_id"));

XLA_FFI_DEFINE_HANDLER(kBroadcastHandler, BroadcastImpl,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("root_rank")
                           .Attr<int32_t>("process_set_id"));

XLA_FFI_DEFINE_HANDLER(kAlltoallHandler, AlltoallImpl,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("process_set_id")
                           .Attr<ffi::Span<const int64_t>>("splits")
                           .Attr<ffi::Span<const int64_t>>("received_splits"));

XLA_FFI_DEFINE_HANDLER(kJoinHandler, JoinImpl,
                       ffi::Ffi::Bind()
                           .Ret<ffi::BufferR0<ffi::DataType::S32>>()
                           .Attr<std::string_view>("op_type")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("process_set_id"));

XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllreduceTarget, "Host", kAllreduceHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kReducescatterTarget, "Host", kReducescatterHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllgatherTarget, "Host", kAllgatherHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kBroadcastTarget, "Host", kBroadcastHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAlltoallTarget, "Host", kAlltoallHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kJoinTarget, "Host", kJoinHandler);

// ---------------------------------------------------------------------------
// tf2xla kernels (compile time)
// ---------------------------------------------------------------------------

using tensorflow::OpKernelConstruction;
using tensorflow::XlaOpKernel;
using tensorflow::XlaOpKernelContext;

// An MLIR string literal: typed-FFI attributes travel as the text of an MLIR
// dictionary in the custom call's backend_config, which XLA's CPU runtime
// parses into the handler's attributes when it builds the call frame.
std::string MlirString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7f) {
      absl::StrAppend(&out, "\\", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

// %e always carries an exponent, so MLIR reads it as a float literal.
std::string MlirF64(double v) { return absl::StrFormat("%.17e : f64", v); }
std::string MlirI32(int64_t v) { return absl::StrCat(v, " : i32"); }
// A dense array, which the handlers read as a Span ("array<i64>" when empty).
std::string MlirI64Array(const std::vector<int64_t>& v) {
  return v.empty() ? "array<i64>" : absl::StrCat("array<i64: ", absl::StrJoin(v, ", "), ">");
}

absl::Status ProcessSetInfo(std::string_view op_type, int64_t process_set_id, hvd_process_set_info* info) {
  *info = hvd_process_set_info{};
  info->struct_size = HVD_PROCESS_SET_INFO_STRUCT_SIZE;
  info->process_set_id = static_cast<int32_t>(process_set_id);
  if (ErrorPtr e{hvd_get_process_set_info(info)}) return ToStatus(op_type, e.get());
  if (info->rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": this rank is not a member of process set ", process_set_id));
  }
  return absl::OkStatus();
}

// What each rank contributes per tensor to a compile-time exchange ends with
// this marker: see HorovodXlaOp::ExchangeRows.
constexpr int64_t kShapeExchangeMarker = 0x6876642d786c61;  // "hvd-xla"

// Elements per first-dimension row.
int64_t RowElements(const xla::Shape& s) {
  int64_t n = 1;
  for (size_t d = 1; d < s.dimensions().size(); ++d) n *= s.dimensions(d);
  return n;
}

// Base of the kernels: one custom call per node. By default its operands are
// all of the node's inputs (one for HorovodAllreduce, num_tensors for the
// grouped ops) and it has one result per output.
class HorovodXlaOp : public XlaOpKernel {
 public:
  HorovodXlaOp(OpKernelConstruction* c, const char* target) : XlaOpKernel(c), target_(target) {
    // HorovodJoin has neither attribute and keeps the defaults.
    if (c->HasAttr("ignore_name_scope")) OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope_));
    if (c->HasAttr("process_set_id")) OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    Lowering l;
    OP_REQUIRES_OK(ctx, Lower(ctx, &l));
    const std::string attrs =
        absl::StrCat("{op_type = ", MlirString(type_string()), ", name = ", MlirString(TensorName()),
                     ", process_set_id = ", MlirI32(process_set_id_), l.attributes, "}");
    const bool grouped = l.results.size() != 1 || type_string().find("Grouped") != std::string::npos;
    xla::Shape result_shape = grouped ? xla::ShapeUtil::MakeTupleShape(l.results) : l.results[0];
    xla::XlaOp call = EmitCustomCall(ctx->builder(), l.operands, l.operand_shapes, result_shape, attrs);
    std::vector<xla::XlaOp> values;
    if (!grouped) {
      values.push_back(call);
    } else {
      for (size_t i = 0; i < l.results.size(); ++i) values.push_back(xla::GetTupleElement(call, i));
    }
    OP_REQUIRES_OK(ctx, Deliver(ctx, values));
  }

 protected:
  // The custom call, less the attributes every one carries.
  struct Lowering {
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Shape> operand_shapes;
    std::vector<xla::Shape> results;  // the node's first results.size() outputs
    std::string attributes;           // ", key = value" pairs
  };

  // Every input becomes an operand; ResultShapes and ExtraAttributes say the
  // rest. Alltoall overrides this: its splits are attributes, not operands.
  virtual absl::Status Lower(XlaOpKernelContext* ctx, Lowering* l) {
    for (int i = 0; i < ctx->num_inputs(); ++i) TF_RETURN_IF_ERROR(AddOperand(ctx, i, l));
    TF_RETURN_IF_ERROR(ResultShapes(l->operand_shapes, &l->results));
    l->attributes = ExtraAttributes();
    return absl::OkStatus();
  }

  // Input `input` as the next operand; the in-place broadcast's inputs are
  // variables, whose values it sends instead.
  virtual absl::Status AddOperand(XlaOpKernelContext* ctx, int input, Lowering* l) {
    auto shape = ctx->InputXlaShape(input);
    TF_RETURN_IF_ERROR(shape.status());
    l->operands.push_back(ctx->Input(input));
    l->operand_shapes.push_back(*shape);
    return absl::OkStatus();
  }

  // The custom call's results become the node's outputs, in order; the
  // in-place broadcast, which has none, writes them to its variables instead.
  virtual absl::Status Deliver(XlaOpKernelContext* ctx, const std::vector<xla::XlaOp>& results) {
    for (size_t i = 0; i < results.size(); ++i) ctx->SetOutput(static_cast<int>(i), results[i]);
    return absl::OkStatus();
  }

  // The result shapes XLA must know now (the input shapes, unless the
  // collective changes the first dimension).
  virtual absl::Status ResultShapes(const std::vector<xla::Shape>& inputs, std::vector<xla::Shape>* results) {
    *results = inputs;
    return absl::OkStatus();
  }

  // ", key = value" pairs added to the custom call's attributes.
  virtual std::string ExtraAttributes() const { return ""; }

  // The engine's tensor name: the node name, or its last '/' component with
  // ignore_name_scope - the rule of the non-XLA kernels, so ranks match.
  std::string TensorName() const {
    std::string_view n = name();
    if (ignore_name_scope_) {
      auto slash = n.rfind('/');
      if (slash != std::string_view::npos) n = n.substr(slash + 1);
    }
    return std::string(n);
  }

  static constexpr char kEveryRankCompiles[] =
      "every rank of the process set must compile the function at the same call (input shapes and alltoall "
      "splits changing on all ranks together)";

  // Tells every rank of the process set what each rank knows while compiling
  // (first dimensions, splits): an engine allgather of one int64 row per
  // tensor, mine[i] with kShapeExchangeMarker appended; (*rows)[i] receives
  // the ranks' rows back to back. Every rank compiles the function at the
  // same call (same graph, inputs changing together), so this completes. It
  // runs under the tensors' own names, so a rank that recompiles while another
  // runs its cached program meets that rank's real collective of the same
  // name and both fail (int64 [1, width] against the real tensor) instead of
  // waiting on each other forever; the marker catches a user int64
  // [k, width] allgather that would match.
  absl::Status ExchangeRows(std::vector<std::vector<int64_t>> mine, size_t ranks,
                            std::vector<std::vector<int64_t>>* rows) const {
    const std::string op_type = type_string();
    const std::string name = TensorName();
    const size_t n = mine.size();
    for (auto& m : mine) m.push_back(kShapeExchangeMarker);
    if (ranks == 1) {
      *rows = std::move(mine);
      return absl::OkStatus();
    }
    rows->assign(n, {});
    std::vector<std::array<int64_t, 2>> row_shapes(n);
    std::vector<DLTensor> ins(n);
    std::vector<std::string> names(n);
    std::vector<hvd_tensor_args> tensors(n);
    ResultTargets targets;
    for (size_t i = 0; i < n; ++i) {
      const int64_t width = static_cast<int64_t>(mine[i].size());
      row_shapes[i] = {1, width};
      (*rows)[i].assign(ranks * mine[i].size(), -1);
      ins[i] = DLTensor{};
      ins[i].data = mine[i].data();
      ins[i].device = DLDevice{kDLCPU, 0};
      ins[i].ndim = 2;
      ins[i].dtype = DLDataType{kDLInt, 64, 1};
      ins[i].shape = row_shapes[i].data();
      names[i] = MemberName(name, i, n);
      tensors[i] = TensorArgs(&ins[i], nullptr, names[i]);
      targets.targets.push_back({(*rows)[i].data(), {static_cast<int64_t>(ranks), width}});
    }
    hvd_enqueue_args args{};
    args.collective = HVD_ALLGATHER;
    args.process_set_id = static_cast<int32_t>(process_set_id_);
    args.tensors = tensors.data();
    args.num_tensors = n;
    args.alloc = &AllocIntoTargets;
    args.alloc_ctx = &targets;
    absl::Status s = EnqueueAndWait(op_type, &args);
    const std::string what = absl::StrCat(op_type, ": while compiling '", name,
                                          "' for XLA, the ranks' shapes could not be exchanged (",
                                          kEveryRankCompiles, ")");
    if (!targets.mismatch.empty()) return absl::FailedPreconditionError(absl::StrCat(what, "; ", targets.mismatch));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(what, "; ", s.message()));
    for (size_t i = 0; i < n; ++i) {
      const size_t width = mine[i].size();
      for (size_t r = 0; r < ranks; ++r) {
        if ((*rows)[i][r * width + width - 1] != kShapeExchangeMarker) {
          return absl::FailedPreconditionError(absl::StrCat(op_type, ": while compiling '", name,
                                                            "' for XLA, rank ", r,
                                                            " did not take part in the shape exchange: ",
                                                            kEveryRankCompiles));
        }
      }
    }
    return absl::OkStatus();
  }

  int64_t process_set_id_ = 0;

 private:
  // Pins the default (row-major) layout on every operand and result, which
  // is what the handlers' DLTensors describe; side effects keep XLA from
  // merging two identical collectives or dropping one whose result is unused.
  xla::XlaOp EmitCustomCall(xla::XlaBuilder* b, const std::vector<xla::XlaOp>& operands,
                            const std::vector<xla::Shape>& operand_shapes, const xla::Shape& result_shape,
                            const std::string& attributes) const {
    std::vector<xla::Shape> with_layout;
    with_layout.reserve(operand_shapes.size());
    for (const auto& s : operand_shapes) with_layout.push_back(WithDefaultLayout(s));
    return xla::CustomCallWithLayout(b, target_, operands, WithDefaultLayout(result_shape), with_layout, attributes,
                                     /*has_side_effect=*/true, /*output_operand_aliasing=*/{},
                                     /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                                     xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
  }

  static xla::Shape WithDefaultLayout(const xla::Shape& s) {
    if (s.IsTuple()) {
      std::vector<xla::Shape> parts;
      for (const auto& p : s.tuple_shapes()) parts.push_back(WithDefaultLayout(p));
      return xla::ShapeUtil::MakeTupleShape(parts);
    }
    return xla::ShapeUtil::MakeShapeWithDescendingLayout(s.element_type(), s.dimensions());
  }

  const char* target_;
  bool ignore_name_scope_ = false;
};

// HorovodAllreduce, HorovodGroupedAllreduce, and the reducescatters (same
// attributes, own target).
class ReductionXlaOp : public HorovodXlaOp {
 public:
  ReductionXlaOp(OpKernelConstruction* c, const char* target) : HorovodXlaOp(c, target) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

 protected:
  std::string ExtraAttributes() const override {
    return absl::StrCat(", reduce_op = ", MlirI32(reduce_op_), ", prescale_factor = ", MlirF64(prescale_),
                        ", postscale_factor = ", MlirF64(postscale_));
  }

 private:
  int64_t reduce_op_ = HVD_OP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class AllreduceXlaOp : public ReductionXlaOp {
 public:
  explicit AllreduceXlaOp(OpKernelConstruction* c) : ReductionXlaOp(c, kAllreduceTarget) {}
};

// Each rank's block of the first dimension is known locally: the engine splits
// it as evenly as possible, lower ranks of the set taking the extra rows.
class ReducescatterXlaOp : public ReductionXlaOp {
 public:
  explicit ReducescatterXlaOp(OpKernelConstruction* c) : ReductionXlaOp(c, kReducescatterTarget) {}

 protected:
  absl::Status ResultShapes(const std::vector<xla::Shape>& inputs, std::vector<xla::Shape>* results) override {
    hvd_process_set_info info;
    TF_RETURN_IF_ERROR(ProcessSetInfo(type_string(), process_set_id_, &info));
    results->clear();
    for (const xla::Shape& s : inputs) {
      if (s.dimensions().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(type_string(), ": '", TensorName(), "' must have at least one dimension, got a scalar"));
      }
      std::vector<int64_t> dims(s.dimensions().begin(), s.dimensions().end());
      dims[0] = dims[0] / info.size + (info.rank < dims[0] % info.size ? 1 : 0);
      results->push_back(xla::ShapeUtil::MakeShape(s.element_type(), dims));
    }
    return absl::OkStatus();
  }
};

class BroadcastXlaOp : public HorovodXlaOp {
 public:
  explicit BroadcastXlaOp(OpKernelConstruction* c) : HorovodXlaOp(c, kBroadcastTarget) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

 protected:
  std::string ExtraAttributes() const override { return absl::StrCat(", root_rank = ", MlirI32(root_rank_)); }

 private:
  int64_t root_rank_ = 0;
};

// HorovodBroadcastInplaceResource: an XLA program cannot write into a
// variable's buffer while it runs, so the lowering reads every variable,
// broadcasts the values with one hvd_broadcast custom call (one engine group:
// "<name>_<i>" per variable when there are several, as the non-XLA kernel
// names them) and assigns the results back, which TensorFlow stores into the
// variables when the program finishes. Reading with T fails compilation on a
// variable of another dtype, as the non-XLA kernel fails at run time.
class BroadcastInplaceResourceXlaOp : public BroadcastXlaOp {
 public:
  explicit BroadcastInplaceResourceXlaOp(OpKernelConstruction* c) : BroadcastXlaOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("T", &dtype_));
  }

 protected:
  absl::Status AddOperand(XlaOpKernelContext* ctx, int input, Lowering* l) override {
    tensorflow::TensorShape shape;
    xla::XlaOp value;
    TF_RETURN_IF_ERROR(ctx->ReadVariableInput(input, dtype_, &shape, &value));
    auto xla_shape = ctx->builder()->GetShape(value);
    TF_RETURN_IF_ERROR(xla_shape.status());
    l->operands.push_back(value);
    l->operand_shapes.push_back(*xla_shape);
    return absl::OkStatus();
  }

  absl::Status Deliver(XlaOpKernelContext* ctx, const std::vector<xla::XlaOp>& results) override {
    for (size_t i = 0; i < results.size(); ++i) {
      TF_RETURN_IF_ERROR(ctx->AssignVariable(static_cast<int>(i), dtype_, results[i]));
    }
    return absl::OkStatus();
  }

 private:
  tensorflow::DataType dtype_ = tensorflow::DT_INVALID;
};

// HorovodAllgather and HorovodGroupedAllgather: the result's first dimension
// is the sum of every rank's, which XLA must know now, so the kernel asks the
// other ranks while compiling (ExchangeRows: {first dimension, elements per
// row} per tensor).
class AllgatherXlaOp : public HorovodXlaOp {
 public:
  explicit AllgatherXlaOp(OpKernelConstruction* c) : HorovodXlaOp(c, kAllgatherTarget) {}

 protected:
  absl::Status ResultShapes(const std::vector<xla::Shape>& inputs, std::vector<xla::Shape>* results) override {
    const std::string op_type = type_string();
    const std::string name = TensorName();
    for (const xla::Shape& s : inputs) {
      if (s.dimensions().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(op_type, ": '", name, "' must have at least one dimension, got a scalar"));
      }
    }
    hvd_process_set_info info;
    TF_RETURN_IF_ERROR(ProcessSetInfo(op_type, process_set_id_, &info));
    const size_t n = inputs.size();
    std::vector<std::vector<int64_t>> mine(n);
    for (size_t i = 0; i < n; ++i) mine[i] = {inputs[i].dimensions(0), RowElements(inputs[i])};
    // rows[i][r * 3 ...] = {first dim, row elements, marker} of rank r for tensor i.
    const size_t ranks = static_cast<size_t>(info.size);
    std::vector<std::vector<int64_t>> rows;
    TF_RETURN_IF_ERROR(ExchangeRows(mine, ranks, &rows));

    results->clear();
    for (size_t i = 0; i < n; ++i) {
      std::vector<int64_t> dims(inputs[i].dimensions().begin(), inputs[i].dimensions().end());
      dims[0] = 0;
      for (size_t r = 0; r < ranks; ++r) {
        const int64_t* row = &rows[i][r * 3];
        if (row[1] != mine[i][1]) {
          return absl::FailedPreconditionError(absl::StrCat(
              op_type, ": ranks disagree on the shape of '", MemberName(name, i, n),
              "' beyond the first dimension: rank ", info.rank, " has ", mine[i][1],
              " elements per row, rank ", r, " has ", row[1]));
        }
        dims[0] += row[0];
      }
      results->push_back(xla::ShapeUtil::MakeShape(inputs[i].element_type(), dims));
    }
    return absl::OkStatus();
  }
};

// HorovodAlltoall: how many rows this rank receives from each rank is set by
// the other ranks' splits, so the splits must be compile-time constants (a
// Python list, a constant, splits=None, or an argument of the function, for
// which XLA compiles once per value) and the kernel exchanges them while
// compiling. received_splits becomes a constant of the program: the handler
// checks at run time that the engine's agree, and a constant lets the
// gradient (an alltoall with splits=received_splits) compile too.
class AlltoallXlaOp : public HorovodXlaOp {
 public:
  explicit AlltoallXlaOp(OpKernelConstruction* c) : HorovodXlaOp(c, kAlltoallTarget) {}

 protected:
  absl::Status Lower(XlaOpKernelContext* ctx, Lowering* l) override {
    const std::string op_type = type_string();
    const std::string name = TensorName();
    TF_RETURN_IF_ERROR(AddOperand(ctx, 0, l));
    const xla::Shape& in = l->operand_shapes[0];
    if (in.dimensions().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": '", name, "' must have at least one dimension, got a scalar"));
    }
    std::vector<int64_t> splits;
    if (absl::Status s = ctx->ConstantInputAsIntVector(1, &splits); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_type, ": '", name, "': under XLA (jit_compile=True) splits must be a compile-time constant ",
          "(a Python list, a constant, None or an argument of the function), because they fix the shape of ",
          "the result; ", s.message()));
    }
    hvd_process_set_info info;
    TF_RETURN_IF_ERROR(ProcessSetInfo(op_type, process_set_id_, &info));
    const int64_t ranks = info.size;
    const int64_t rows = in.dimensions(0);

    // Splits this rank cannot send must fail every rank's compilation, not
    // only this one's: the others would wait in the exchange. So the row
    // {splits..., elements per row, valid} is exchanged either way.
    std::string invalid;
    if (splits.empty()) {
      if (rows % ranks != 0) {
        invalid = absl::StrCat("without splits, the first dimension (", rows,
                               ") must divide evenly by the number of ranks (", ranks, ")");
      } else {
        splits.assign(static_cast<size_t>(ranks), rows / ranks);
      }
    } else if (static_cast<int64_t>(splits.size()) != ranks) {
      invalid = absl::StrCat("splits has ", splits.size(), " entries, but the process set has ", ranks, " ranks");
    } else if (std::any_of(splits.begin(), splits.end(), [](int64_t v) { return v < 0; })) {
      invalid = "splits must not be negative";
    } else if (int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t{0}); sum != rows) {
      invalid = absl::StrCat("splits add up to ", sum, " but the first dimension is ", rows);
    }
    std::vector<int64_t> mine(static_cast<size_t>(ranks), 0);
    if (invalid.empty()) mine = splits;
    mine.push_back(RowElements(in));
    mine.push_back(invalid.empty() ? 1 : 0);
    std::vector<std::vector<int64_t>> exchanged;
    TF_RETURN_IF_ERROR(ExchangeRows({mine}, static_cast<size_t>(ranks), &exchanged));
    if (!invalid.empty()) return absl::InvalidArgumentError(absl::StrCat(op_type, ": '", name, "': ", invalid));

    const size_t width = static_cast<size_t>(ranks) + 3;
    std::vector<int64_t> received(static_cast<size_t>(ranks));
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t* row = &exchanged[0][static_cast<size_t>(r) * width];
      if (row[ranks + 1] == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(op_type, ": '", name, "': rank ", r, " passed invalid splits (see its error)"));
      }
      if (row[ranks] != mine[static_cast<size_t>(ranks)]) {
        return absl::FailedPreconditionError(absl::StrCat(
            op_type, ": ranks disagree on the shape of '", name, "' beyond the first dimension: rank ", info.rank,
            " has ", mine[static_cast<size_t>(ranks)], " elements per row, rank ", r, " has ", row[ranks]));
      }
      received[static_cast<size_t>(r)] = row[info.rank];
    }
    std::vector<int64_t> dims(in.dimensions().begin(), in.dimensions().end());
    dims[0] = std::accumulate(received.begin(), received.end(), int64_t{0});
    l->results = {xla::ShapeUtil::MakeShape(in.element_type(), dims)};
    l->attributes = absl::StrCat(", splits = ", MlirI64Array(splits), ", received_splits = ", MlirI64Array(received));

    tensorflow::Tensor received_splits(tensorflow::DT_INT32, tensorflow::TensorShape({ranks}));
    for (int64_t r = 0; r < ranks; ++r) {
      received_splits.vec<int32_t>()(r) = static_cast<int32_t>(received[static_cast<size_t>(r)]);
    }
    ctx->SetConstantOutput(1, received_splits);
    return absl::OkStatus();
  }
};

// HorovodJoin: no operand, an int32 scalar result (the last rank to join).
class JoinXlaOp : public HorovodXlaOp {
 public:
  explicit JoinXlaOp(OpKernelConstruction* c) : HorovodXlaOp(c, kJoinTarget) {}

 protected:
  absl::Status ResultShapes(const std::vector<xla::Shape>&, std::vector<xla::Shape>* results) override {
    *results = {xla::ShapeUtil::MakeShape(xla::S32, {})};
    return absl::OkStatus();
  }
};

REGISTER_XLA_OP(Name("HorovodAllreduce"), AllreduceXlaOp);
REGISTER_XLA_OP(Name("HorovodGroupedAllreduce"), AllreduceXlaOp);
REGISTER_XLA_OP(Name("HorovodReducescatter"), ReducescatterXlaOp);
REGISTER_XLA_OP(Name("HorovodGroupedReducescatter"), ReducescatterXlaOp);
REGISTER_XLA_OP(Name("HorovodAllgather"), AllgatherXlaOp);
REGISTER_XLA_OP(Name("HorovodGroupedAllgather"), AllgatherXlaOp);
REGISTER_XLA_OP(Name("HorovodBroadcast"), BroadcastXlaOp);
// The variables are resource inputs, which tf2xla passes to the program as
// its own arguments and results: nothing needs to be known at compile time.
REGISTER_XLA_OP(Name("HorovodBroadcastInplaceResource"), BroadcastInplaceResourceXlaOp);
// Constant splits let XLA compile an alltoall whose splits arrive as an
// argument of the function (once per value), as it does for shapes.
REGISTER_XLA_OP(Name("HorovodAlltoall").CompileTimeConstantInput("splits"), AlltoallXlaOp);
REGISTER_XLA_OP(Name("HorovodJoin"), JoinXlaOp);

}  // namespace
}  // namespace hvd_tf_xla
