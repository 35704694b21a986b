// xla_tf2xla_kernels.cc - the compile-time half of Horovod's XLA support:
// tf2xla kernels that lower HorovodAllreduce, HorovodAllgather,
// HorovodBroadcast, HorovodReducescatter (and their grouped forms),
// HorovodBroadcastInplaceResource, HorovodAlltoall and HorovodJoin inside
// tf.function(jit_compile=True) to typed-FFI custom calls, which the
// handlers of xla_ffi_handlers.cc run.
//
// The op definitions belong to libhvd_tensorflow.so, which mpi_ops loads
// before this library; this file registers only XLA kernels.
//
// A kernel reads the node's attributes and emits
//   custom-call(target="hvd_allreduce", backend_config={op_type = ..., name = ..., ...})
// with has_side_effect, so XLA never merges or drops it.
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
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core_calls.h"
#include "hvd/c_api.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"  // XlaOpKernel
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"  // REGISTER_XLA_OP
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"
#include "xla_custom_calls.h"

namespace hvd_tf {
namespace {

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
  if (hvd_error* e = hvd_get_process_set_info(info)) {
    return StatusFromError(e, op_type, OpTypePrefix::kEveryMessage);
  }
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

  // The engine's tensor name, by the non-XLA kernels' rule, so ranks match.
  std::string TensorName() const { return EngineName(name(), ignore_name_scope_); }

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
    hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
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
}  // namespace hvd_tf
