// xla_ops.cc - Horovod collectives inside XLA programs
// (tf.function(jit_compile=True)) on the CPU: tf2xla kernels that lower
// HorovodAllreduce, HorovodAllgather, HorovodBroadcast, HorovodReducescatter
// and their grouped forms to typed-FFI custom calls, and the XLA FFI handlers
// ("Host" platform) that run those custom calls through hvd-core's C ABI.
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
// Allgather's first dimension depends on the other ranks, so its kernel
// exchanges first dimensions through the engine while compiling (every rank
// compiles the same function at its first call with new input shapes), and
// the handler refuses a negotiated result of any other shape at run time.

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "hvd/c_api.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
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

// Enqueues `args` and waits for it on this thread (which then drives the
// engine itself: HVD_ENQUEUE_CALLER_WAITS).
absl::Status EnqueueAndWait(std::string_view op_type, hvd_enqueue_args* args) {
  args->struct_size = HVD_ENQUEUE_ARGS_STRUCT_SIZE;
  args->flags |= HVD_ENQUEUE_CALLER_WAITS;
  hvd_handle* raw = nullptr;
  if (ErrorPtr e{hvd_enqueue(args, &raw)}) return ToStatus(op_type, e.get());
  HandlePtr handle(raw);
  if (ErrorPtr e{hvd_handle_wait(handle.get(), -1.0)}) return ToStatus(op_type, e.get());
  return absl::OkStatus();
}

hvd_tensor_args TensorArgs(const DLTensor* input, DLTensor* output, std::string_view name) {
  hvd_tensor_args t{};
  t.struct_size = HVD_TENSOR_ARGS_STRUCT_SIZE;
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
// reducescatter): straight into XLA's result buffers, whose shapes were
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
};

// Runs one (possibly grouped) collective over the custom call's operands and
// results, pairwise.
ffi::Error RunCollective(const CollectiveAttrs& a, ffi::RemainingArgs ins, ffi::RemainingRets outs) {
  const size_t n = ins.size();
  if (outs.size() != n || n == 0) {
    return ffi::Error::InvalidArgument(
        absl::StrCat(a.op_type, ": ", n, " operands but ", outs.size(), " results"));
  }
  const bool engine_allocates = a.collective == HVD_ALLGATHER || a.collective == HVD_REDUCESCATTER;
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
  absl::Status s = EnqueueAndWait(a.op_type, &args);
  if (!targets.mismatch.empty()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      absl::StrCat(a.op_type, ": '", a.name, "': ", targets.mismatch));
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

XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllreduceTarget, "Host", kAllreduceHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kReducescatterTarget, "Host", kReducescatterHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kAllgatherTarget, "Host", kAllgatherHandler);
XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), kBroadcastTarget, "Host", kBroadcastHandler);

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

// Base of the kernels: one custom call per node, over all of the node's
// inputs (one for HorovodAllreduce, num_tensors for the grouped ops), with
// one result per output.
class HorovodXlaOp : public XlaOpKernel {
 public:
  HorovodXlaOp(OpKernelConstruction* c, const char* target) : XlaOpKernel(c), target_(target) {
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Shape> shapes;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      auto shape = ctx->InputXlaShape(i);
      OP_REQUIRES_OK(ctx, shape.status());
      operands.push_back(ctx->Input(i));
      shapes.push_back(*shape);
    }
    std::vector<xla::Shape> results;
    OP_REQUIRES_OK(ctx, ResultShapes(shapes, &results));
    const std::string attrs =
        absl::StrCat("{op_type = ", MlirString(type_string()), ", name = ", MlirString(TensorName()),
                     ", process_set_id = ", MlirI32(process_set_id_), ExtraAttributes(), "}");
    const bool grouped = ctx->num_outputs() != 1 || type_string().find("Grouped") != std::string::npos;
    xla::Shape result_shape = grouped ? xla::ShapeUtil::MakeTupleShape(results) : results[0];
    xla::XlaOp call = EmitCustomCall(ctx->builder(), operands, shapes, result_shape, attrs);
    if (!grouped) {
      ctx->SetOutput(0, call);
      return;
    }
    for (int i = 0; i < ctx->num_outputs(); ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }

 protected:
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

// What each rank contributes per tensor to the compile-time shape exchange:
// one row {first dimension, elements per row, marker}. The exchange runs under
// the tensors' own names, so a rank that recompiles while another runs its
// cached program meets that rank's real allgather of the same name and both
// fail (int64 [1, 3] against the real tensor) instead of waiting on each other
// forever; the marker catches a user int64 [k, 3] tensor that would match.
constexpr int64_t kShapeExchangeMarker = 0x6876642d786c61;  // "hvd-xla"

// HorovodAllgather and HorovodGroupedAllgather: the result's first dimension
// is the sum of every rank's, which XLA must know now, so the kernel asks the
// other ranks while compiling. Every rank of the process set compiles the
// function at the same call (same graph, input shapes changing together), so
// the synchronous engine allgather below completes.
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
    std::vector<int64_t> row_elements(n, 1);
    for (size_t i = 0; i < n; ++i) {
      for (size_t d = 1; d < inputs[i].dimensions().size(); ++d) row_elements[i] *= inputs[i].dimensions(d);
    }

    // rows[i][r] = {first dim, row elements, marker} of rank r for tensor i.
    const size_t ranks = static_cast<size_t>(info.size);
    std::vector<std::vector<int64_t>> rows(n, std::vector<int64_t>(ranks * 3, -1));
    if (ranks == 1) {
      for (size_t i = 0; i < n; ++i) rows[i] = {inputs[i].dimensions(0), row_elements[i], kShapeExchangeMarker};
    } else {
      TF_RETURN_IF_ERROR(Exchange(inputs, row_elements, ranks, &rows));
    }

    results->clear();
    for (size_t i = 0; i < n; ++i) {
      std::vector<int64_t> dims(inputs[i].dimensions().begin(), inputs[i].dimensions().end());
      dims[0] = 0;
      for (size_t r = 0; r < ranks; ++r) {
        const int64_t* row = &rows[i][r * 3];
        if (row[2] != kShapeExchangeMarker) {
          return absl::FailedPreconditionError(absl::StrCat(
              op_type, ": while compiling '", name, "' for XLA, rank ", r,
              " did not take part in the shape exchange: ", kEveryRankCompiles));
        }
        if (row[1] != row_elements[i]) {
          return absl::FailedPreconditionError(absl::StrCat(
              op_type, ": ranks disagree on the shape of '", MemberName(name, i, n),
              "' beyond the first dimension: rank ", info.rank, " has ", row_elements[i],
              " elements per row, rank ", r, " has ", row[1]));
        }
        dims[0] += row[0];
      }
      results->push_back(xla::ShapeUtil::MakeShape(inputs[i].element_type(), dims));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr char kEveryRankCompiles[] =
      "every rank of the process set must compile the function at the same call (allgather input shapes "
      "changing on all ranks together)";

  absl::Status Exchange(const std::vector<xla::Shape>& inputs, const std::vector<int64_t>& row_elements,
                        size_t ranks, std::vector<std::vector<int64_t>>* rows) {
    const std::string op_type = type_string();
    const std::string name = TensorName();
    const size_t n = inputs.size();
    std::vector<std::array<int64_t, 3>> mine(n);
    int64_t row_shape[2] = {1, 3};
    std::vector<DLTensor> ins(n);
    std::vector<std::string> names(n);
    std::vector<hvd_tensor_args> tensors(n);
    ResultTargets targets;
    for (size_t i = 0; i < n; ++i) {
      mine[i] = {inputs[i].dimensions(0), row_elements[i], kShapeExchangeMarker};
      ins[i] = DLTensor{};
      ins[i].data = mine[i].data();
      ins[i].device = DLDevice{kDLCPU, 0};
      ins[i].ndim = 2;
      ins[i].dtype = DLDataType{kDLInt, 64, 1};
      ins[i].shape = row_shape;
      names[i] = MemberName(name, i, n);
      tensors[i] = TensorArgs(&ins[i], nullptr, names[i]);
      targets.targets.push_back({(*rows)[i].data(), {static_cast<int64_t>(ranks), 3}});
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
                                          "' for XLA, the ranks' first dimensions could not be exchanged (",
                                          kEveryRankCompiles, ")");
    if (!targets.mismatch.empty()) return absl::FailedPreconditionError(absl::StrCat(what, "; ", targets.mismatch));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(what, "; ", s.message()));
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

}  // namespace
}  // namespace hvd_tf_xla
