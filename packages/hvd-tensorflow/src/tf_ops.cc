// tf_ops.cc - Horovod's TensorFlow ops (HorovodAllreduce, HorovodAllgather,
// ...) as asynchronous kernels over hvd-core's C ABI: CPU kernels always,
// GPU kernels too when TensorFlow is a CUDA build (HVD_TF_GPU).
//
// Every collective kernel describes its tensors as DLPack descriptors,
// enqueues them with hvd_enqueue() and returns; the engine's completion
// callback (on the engine's background thread) finishes the op and calls
// TensorFlow's `done`. No inter-op thread is ever blocked on the network, so
// ops inside one graph may complete in any order on any rank: the engine
// matches them across ranks by name.
//
// Names: the engine key of an op is its node name, or only the last
// '/'-separated part of it with ignore_name_scope (Horovod's rule); the
// Python layer picks node names ("HorovodAllreduce_<tensor>") so that they
// agree across ranks. Grouped ops add "_<i>" per tensor.
//
// GPU kernels hand the engine CUDA device pointers and the stream TensorFlow
// queued the inputs' producers on (its compute stream); hvd-core's GPU plane
// orders its own stream after that work, runs NCCL (or stages through host
// memory) and completes the op once the results are written, so consumers
// TensorFlow launches after `done` see them. Shapes and splits stay in host
// memory (HostMemory in the registrations).
//
// Errors map to Horovod's TF statuses (StatusFromError in core_calls.h):
// ranks disagree or hvd.init() missing -> FailedPrecondition; a dead peer or
// a shut-down engine -> Unknown, with the op type first in the message
// (Horovod's elastic code looks for it); bad input on this rank ->
// InvalidArgument.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core_calls.h"
#include "hvd/c_api.h"
#include "tensorflow/core/framework/op.h"  // REGISTER_OP
#include "tensorflow/core/framework/op_kernel.h"  // OpKernel, AsyncOpKernel, REGISTER_KERNEL_BUILDER
#include "tensorflow/core/framework/resource_mgr.h"  // LookupResource, HandleFromInput
#include "tensorflow/core/framework/resource_var.h"  // tensorflow::Var (in-place broadcast targets)
#include "tensorflow/core/framework/shape_inference.h"  // InferenceContext for the ops' shape functions
#if HVD_TF_GPU
#include "tensorflow/core/framework/device_base.h"  // AcceleratorDeviceInfo (the kernel's GPU)
#include "xla/stream_executor/stream.h"             // se::Stream::platform_specific_handle (its CUDA stream)
#endif

namespace hvd_tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
namespace errors = ::tensorflow::errors;

// ---------------------------------------------------------------------------
// Helpers: TF dtypes and tensors as the C ABI takes them

bool to_dlpack(DataType t, DLDataType* out) {
  switch (t) {
    case tensorflow::DT_UINT8: *out = {kDLUInt, 8, 1}; return true;
    case tensorflow::DT_INT8: *out = {kDLInt, 8, 1}; return true;
    case tensorflow::DT_UINT16: *out = {kDLUInt, 16, 1}; return true;
    case tensorflow::DT_INT16: *out = {kDLInt, 16, 1}; return true;
    case tensorflow::DT_INT32: *out = {kDLInt, 32, 1}; return true;
    case tensorflow::DT_INT64: *out = {kDLInt, 64, 1}; return true;
    case tensorflow::DT_HALF: *out = {kDLFloat, 16, 1}; return true;
    case tensorflow::DT_BFLOAT16: *out = {kDLBfloat, 16, 1}; return true;
    case tensorflow::DT_FLOAT: *out = {kDLFloat, 32, 1}; return true;
    case tensorflow::DT_DOUBLE: *out = {kDLFloat, 64, 1}; return true;
    case tensorflow::DT_BOOL: *out = {kDLBool, 8, 1}; return true;
    default: return false;
  }
}

// Takes ownership of `e` (may be NULL). Horovod's messages: only an Unknown
// status starts with the op type.
absl::Status to_status(hvd_error* e, const std::string& op_type) {
  return StatusFromError(e, op_type, OpTypePrefix::kUnknownOnly);
}

// Where this kernel's tensors live: the host, or the GPU TensorFlow runs
// the kernel on, with its compute stream.
Placement placement_of(OpKernelContext* ctx) {
  Placement p;
#if HVD_TF_GPU
  const auto* gpu = ctx->device()->tensorflow_accelerator_device_info();
  if (gpu != nullptr && ctx->op_device_context() != nullptr && ctx->op_device_context()->stream() != nullptr) {
    p.device = DLDevice{kDLCUDA, gpu->gpu_id};
    p.stream = ctx->op_device_context()->stream()->platform_specific_handle().stream;
  }
#endif
  return p;
}

// A DLTensor over a TF tensor's buffer (compact row-major).
struct Descriptor {
  TensorView view;

  absl::Status describe(const Tensor& t, DLDevice device) {
    DLDataType dtype;
    if (!to_dlpack(t.dtype(), &dtype)) {
      return errors::InvalidArgument("Horovod does not support tensors of type ",
                                     tensorflow::DataTypeString(t.dtype()));
    }
    std::vector<int64_t> dims(static_cast<size_t>(t.dims()));
    for (int d = 0; d < t.dims(); ++d) dims[static_cast<size_t>(d)] = t.dim_size(d);
    view.Set(const_cast<char*>(t.tensor_data().data()), dtype, dims.data(), dims.size(), device);
    return absl::OkStatus();
  }
};

std::string op_name(OpKernelConstruction* c) {
  bool ignore_scope = false;
  if (c->HasAttr("ignore_name_scope") && !c->GetAttr("ignore_name_scope", &ignore_scope).ok()) ignore_scope = false;
  return EngineName(c->def().name(), ignore_scope);
}

// ---------------------------------------------------------------------------
// The asynchronous collective kernel. Subclasses say which collective and
// how outputs are laid out; this class owns enqueue and completion.

class CollectiveOp : public AsyncOpKernel {
 public:
  CollectiveOp(OpKernelConstruction* c, hvd_collective collective) : AsyncOpKernel(c), collective_(collective) {
    name_ = op_name(c);
    auto get = [&](const char* attr, auto* value) {
      if (c->HasAttr(attr)) OP_REQUIRES_OK(c, c->GetAttr(attr, value));
    };
    get("process_set_id", &process_set_id_);
    get("reduce_op", &reduce_op_);
    get("prescale_factor", &prescale_);
    get("postscale_factor", &postscale_);
    get("root_rank", &root_rank_);
    get("submitter_blocked", &submitter_blocked_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto call = std::make_unique<Call>();
    call->op = this;
    call->ctx = ctx;
    call->done = std::move(done);
    call->placement = placement_of(ctx);
    absl::Status s = prepare(ctx, call.get());
    if (!s.ok()) {
      ctx->SetStatus(s);
      call->done();
      return;
    }
    hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
    args.collective = collective_;
    args.process_set_id = static_cast<int32_t>(process_set_id_);
    args.reduce_op = static_cast<int32_t>(reduce_op_);
    args.root_rank = static_cast<int32_t>(root_rank_);
    // Horovod's global root (also on process sets); a 0.0 scale factor zeroes.
    args.flags = HVD_ENQUEUE_ROOT_RANK_GLOBAL | HVD_ENQUEUE_SCALE_FACTORS_AS_GIVEN;
    if (submitter_blocked_) args.flags |= HVD_ENQUEUE_SUBMITTER_BLOCKED;
    args.prescale_factor = prescale_;
    args.postscale_factor = postscale_;
    args.tensors = call->args.data();
    args.num_tensors = call->args.size();
    args.device_stream = call->placement.stream;
    if (allocates_outputs()) {
      args.alloc = &Call::allocate;
      args.alloc_ctx = call.get();
    }
    args.on_done = &Call::finished;
    args.on_done_ctx = call.get();
    // The callback may run before hvd_enqueue returns: hand the call over
    // first, and only touch it again on an enqueue error (no callback then).
    Call* raw = call.release();
    hvd_handle* handle = nullptr;
    hvd_error* e = hvd_enqueue(&args, &handle);
    if (e != nullptr) {
      std::unique_ptr<Call> owned(raw);
      ctx->SetStatus(to_status(e, type_string()));
      owned->done();
    }
  }

 protected:
  // One in-flight execution of the op.
  struct Call {
    CollectiveOp* op = nullptr;
    OpKernelContext* ctx = nullptr;
    DoneCallback done;
    Placement placement;
    std::vector<Descriptor> inputs, outputs;
    std::vector<std::string> names;
    std::vector<hvd_tensor_args> args;
    std::vector<int64_t> splits;
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> vars;  // keep in-place targets alive

    static int32_t allocate(void* self, size_t index, int32_t ndim, const int64_t* shape, DLDataType,
                            void** data) {
      auto* call = static_cast<Call*>(self);
      TensorShape ts;
      for (int32_t d = 0; d < ndim; ++d) {
        if (!ts.AddDimWithStatus(shape[d]).ok()) return 1;
      }
      Tensor* out = nullptr;
      absl::Status s = call->ctx->allocate_output(static_cast<int>(index), ts, &out);
      if (!s.ok()) return 2;
      *data = const_cast<char*>(out->tensor_data().data());
      return 0;
    }

    static void finished(void* self, hvd_handle* handle) {
      std::unique_ptr<Call> call(static_cast<Call*>(self));
      absl::Status s = to_status(hvd_handle_wait(handle, 0), call->op->type_string());
      if (s.ok()) s = call->op->complete(call->ctx, handle);
      hvd_handle_release(handle);
      if (!s.ok()) call->ctx->SetStatus(s);
      call->done();
    }
  };

  // Adds one tensor to the call: `in` is sent; `out` (optional) receives the result.
  absl::Status add(Call* call, const Tensor& in, Tensor* out, int index, int count) {
    call->inputs.emplace_back();
    TF_RETURN_IF_ERROR(call->inputs.back().describe(in, call->placement.device));
    if (out != nullptr) {
      call->outputs.emplace_back();
      TF_RETURN_IF_ERROR(call->outputs.back().describe(*out, call->placement.device));
    }
    call->names.push_back(MemberName(name_, static_cast<size_t>(index), static_cast<size_t>(count)));
    return absl::OkStatus();
  }

  // Called after every add(): vectors no longer grow, pointers are stable.
  void link(Call* call) {
    call->args.resize(call->inputs.size());
    for (size_t i = 0; i < call->inputs.size(); ++i) {
      hvd_tensor_args& a = call->args[i];
      a = TensorArgs(&call->inputs[i].view.tensor,
                     i < call->outputs.size() ? &call->outputs[i].view.tensor : nullptr, call->names[i]);
      if (!call->splits.empty()) {
        a.splits = call->splits.data();
        a.num_splits = call->splits.size();
      }
    }
  }

  // Default: each input i produces output i with the engine-chosen shape.
  virtual absl::Status prepare(OpKernelContext* ctx, Call* call) {
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) TF_RETURN_IF_ERROR(add(call, ctx->input(i), nullptr, i, n));
    link(call);
    return absl::OkStatus();
  }
  virtual bool allocates_outputs() const { return true; }
  virtual absl::Status complete(OpKernelContext*, hvd_handle*) { return absl::OkStatus(); }

  hvd_collective collective_;
  std::string name_;
  int64_t process_set_id_ = 0;
  int64_t reduce_op_ = HVD_OP_SUM;
  int64_t root_rank_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  // Set by the Python wrappers for ops executed eagerly: the calling thread
  // waits for this op, so the engine may count it as blocked on it.
  bool submitter_blocked_ = false;
};

// Results with the input's shape (allreduce, broadcast): the output buffer is
// given up front, reusing the input's buffer when TensorFlow allows it.
class SameShapeOp : public CollectiveOp {
 public:
  using CollectiveOp::CollectiveOp;

 protected:
  absl::Status prepare(OpKernelContext* ctx, Call* call) override {
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) {
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &out));
      TF_RETURN_IF_ERROR(add(call, ctx->input(i), out, i, n));
    }
    link(call);
    return absl::OkStatus();
  }
  bool allocates_outputs() const override { return false; }
};

class AllreduceOp : public SameShapeOp {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : SameShapeOp(c, HVD_ALLREDUCE) {}
};

class BroadcastOp : public SameShapeOp {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : SameShapeOp(c, HVD_BROADCAST) {}
};

class AllgatherOp : public CollectiveOp {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : CollectiveOp(c, HVD_ALLGATHER) {}
};

class ReducescatterOp : public CollectiveOp {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : CollectiveOp(c, HVD_REDUCESCATTER) {}
};

class AlltoallOp : public CollectiveOp {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : CollectiveOp(c, HVD_ALLTOALL) {}

 protected:
  absl::Status prepare(OpKernelContext* ctx, Call* call) override {
    const Tensor& splits = ctx->input(1);
    if (splits.dims() != 1) {
      return errors::InvalidArgument("HorovodAlltoall: splits must be a vector, got shape ",
                                     splits.shape().DebugString());
    }
    auto flat = splits.flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) call->splits.push_back(flat(i));
    TF_RETURN_IF_ERROR(add(call, ctx->input(0), nullptr, 0, 1));
    link(call);
    return absl::OkStatus();
  }

  absl::Status complete(OpKernelContext* ctx, hvd_handle* handle) override {
    hvd_result r = HVD_RESULT_INIT;
    r.tensor_index = 0;
    TF_RETURN_IF_ERROR(to_status(hvd_handle_get_result(handle, &r), type_string()));
    Tensor* received = nullptr;
    TF_RETURN_IF_ERROR(
        ctx->allocate_output(1, TensorShape({static_cast<int64_t>(r.num_received_splits)}), &received));
    auto flat = received->flat<int32_t>();
    for (size_t i = 0; i < r.num_received_splits; ++i) flat(i) = static_cast<int32_t>(r.received_splits[i]);
    return absl::OkStatus();
  }
};

class JoinOp : public CollectiveOp {
 public:
  explicit JoinOp(OpKernelConstruction* c) : CollectiveOp(c, HVD_JOIN) {}

 protected:
  absl::Status prepare(OpKernelContext*, Call* call) override {
    // Join carries no tensor: one nameless entry (the engine names it).
    call->args.resize(0);
    return absl::OkStatus();
  }
  bool allocates_outputs() const override { return false; }
  absl::Status complete(OpKernelContext* ctx, hvd_handle* handle) override {
    hvd_result r = HVD_RESULT_INIT;
    TF_RETURN_IF_ERROR(to_status(hvd_handle_get_result(handle, &r), type_string()));
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = r.last_joined_rank;
    return absl::OkStatus();
  }
};

// Broadcast straight into resource variables' buffers (broadcast_ of
// tf.Variables, broadcast_variables(inplace=True)).
class BroadcastInplaceResourceOp : public CollectiveOp {
 public:
  explicit BroadcastInplaceResourceOp(OpKernelConstruction* c) : CollectiveOp(c, HVD_BROADCAST) {
    OP_REQUIRES_OK(c, c->GetAttr("T", &dtype_));
  }

 protected:
  absl::Status prepare(OpKernelContext* ctx, Call* call) override {
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) {
      tensorflow::core::RefCountPtr<tensorflow::Var> var;
      TF_RETURN_IF_ERROR(tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), &var));
      Tensor* t = nullptr;
      {
        tensorflow::mutex_lock lock(*var->mu());
        if (!var->is_initialized) {
          return errors::FailedPrecondition("HorovodBroadcastInplaceResource: variable ", i,
                                            " is not initialized");
        }
        t = var->tensor();
      }
      if (t->dtype() != dtype_) {
        return errors::InvalidArgument("HorovodBroadcastInplaceResource: variable ", i, " has type ",
                                       tensorflow::DataTypeString(t->dtype()), ", the op expects ",
                                       tensorflow::DataTypeString(dtype_));
      }
      TF_RETURN_IF_ERROR(add(call, *t, t, i, n));
      call->vars.push_back(std::move(var));
    }
    link(call);
    return absl::OkStatus();
  }
  bool allocates_outputs() const override { return false; }

 private:
  DataType dtype_;
};

// ---------------------------------------------------------------------------
// Topology ops: evaluated when the graph runs, so graphs built before
// hvd.init() (or reused across an elastic re-init) see the current values.

class TopologyOp : public OpKernel {
 public:
  enum class What { kSize, kLocalSize, kRank, kLocalRank, kIncluded };
  TopologyOp(OpKernelConstruction* c, What what) : OpKernel(c), what_(what) {
    if (c->HasAttr("process_set_id")) OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void Compute(OpKernelContext* ctx) override {
    int32_t value = 0;
    if (what_ == What::kIncluded || (what_ == What::kSize && process_set_id_ != 0)) {
      hvd_process_set_info info = HVD_PROCESS_SET_INFO_INIT;
      info.process_set_id = static_cast<int32_t>(process_set_id_);
      OP_REQUIRES_OK(ctx, to_status(hvd_get_process_set_info(&info), type_string()));
      value = what_ == What::kSize ? info.size : (info.rank >= 0 ? 1 : 0);
    } else {
      hvd_topology topo = HVD_TOPOLOGY_INIT;
      OP_REQUIRES_OK(ctx, to_status(hvd_get_topology(&topo), type_string()));
      switch (what_) {
        case What::kSize: value = topo.size; break;
        case What::kLocalSize: value = topo.local_size; break;
        case What::kRank: value = topo.rank; break;
        default: value = topo.local_rank; break;
      }
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  What what_;
  int64_t process_set_id_ = 0;
};

template <TopologyOp::What W>
class Topology : public TopologyOp {
 public:
  explicit Topology(OpKernelConstruction* c) : TopologyOp(c, W) {}
};

// ---------------------------------------------------------------------------
// Op registrations

absl::Status same_shape(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// First dimension known only after negotiation (allgather, reducescatter).
absl::Status unknown_first_dim(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle in, out;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
    TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

absl::Status scalar_output(InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

#define HVD_NUMERIC_TYPES "{uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64}"
#define HVD_ALL_TYPES "{uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}"

REGISTER_OP("HorovodAllreduce")
    .Attr("T: " HVD_NUMERIC_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensor: T")
    .Output("sum: T")
    .SetShapeFn(same_shape)
    .Doc("Reduces `tensor` across the ranks of the process set (op: Horovod's reduce op constant).");

REGISTER_OP("HorovodGroupedAllreduce")
    .Attr("T: " HVD_NUMERIC_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensors: num_tensors*T")
    .Output("sum: num_tensors*T")
    .SetShapeFn(same_shape)
    .Doc("Reduces every tensor of `tensors` across the ranks, negotiated and fused as one group.");

REGISTER_OP("HorovodAllgather")
    .Attr("T: " HVD_ALL_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(unknown_first_dim)
    .Doc("Concatenates `tensor` from every rank along the first dimension (which may differ per rank).");

REGISTER_OP("HorovodGroupedAllgather")
    .Attr("T: " HVD_ALL_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensors: num_tensors*T")
    .Output("output: num_tensors*T")
    .SetShapeFn(unknown_first_dim)
    .Doc("Allgathers every tensor of `tensors` as one group.");

REGISTER_OP("HorovodBroadcast")
    .Attr("T: " HVD_ALL_TYPES)
    .Attr("root_rank: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(same_shape)
    .Doc("Returns `tensor` as sent by `root_rank` (a global rank that belongs to the process set).");

REGISTER_OP("HorovodBroadcastInplaceResource")
    .Attr("T: " HVD_ALL_TYPES)
    .Attr("num_variables: int")
    .Attr("root_rank: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("resources: num_variables*resource")
    .SetShapeFn([](InferenceContext*) { return absl::OkStatus(); })
    .Doc("Overwrites resource variables with `root_rank`'s values, in place.");

REGISTER_OP("HorovodReducescatter")
    .Attr("T: " HVD_NUMERIC_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(unknown_first_dim)
    .Doc("Reduces `tensor` across ranks and returns this rank's slice of the first dimension.");

REGISTER_OP("HorovodGroupedReducescatter")
    .Attr("T: " HVD_NUMERIC_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensors: num_tensors*T")
    .Output("output: num_tensors*T")
    .SetShapeFn(unknown_first_dim)
    .Doc("Reducescatters every tensor of `tensors` as one group.");

REGISTER_OP("HorovodAlltoall")
    .Attr("T: " HVD_ALL_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("submitter_blocked: bool = False")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle in, out;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
      TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Sends splits[i] first-dimension rows of `tensor` to rank i; returns what was received and "
         "how many rows came from each rank.");

REGISTER_OP("HorovodJoin")
    .Output("output: int32")
    .SetIsStateful()
    .SetShapeFn(scalar_output)
    .Doc("Blocks until every rank joined; returns the last rank to join.");

#define HVD_TOPOLOGY_OP(NAME, DOC) \
  REGISTER_OP(NAME).Output("output: int32").SetIsStateful().SetShapeFn(scalar_output).Doc(DOC)

HVD_TOPOLOGY_OP("HorovodLocalSize", "Number of ranks on this host.");
HVD_TOPOLOGY_OP("HorovodRank", "This process's rank.");
HVD_TOPOLOGY_OP("HorovodLocalRank", "This process's rank on its host.");
REGISTER_OP("HorovodSize")
    .Attr("process_set_id: int = 0")
    .Output("output: int32")
    .SetIsStateful()
    .SetShapeFn(scalar_output)
    .Doc("Number of ranks in the process set.");
REGISTER_OP("HorovodProcessSetIncluded")
    .Attr("process_set_id: int = 0")
    .Output("output: int32")
    .SetIsStateful()
    .SetShapeFn(scalar_output)
    .Doc("1 when this process belongs to the process set, else 0.");

#define HVD_CPU_KERNEL(NAME, CLASS) \
  REGISTER_KERNEL_BUILDER(Name(NAME).Device(::tensorflow::DEVICE_CPU), CLASS)

HVD_CPU_KERNEL("HorovodAllreduce", AllreduceOp);
HVD_CPU_KERNEL("HorovodGroupedAllreduce", AllreduceOp);
HVD_CPU_KERNEL("HorovodAllgather", AllgatherOp);
HVD_CPU_KERNEL("HorovodGroupedAllgather", AllgatherOp);
HVD_CPU_KERNEL("HorovodBroadcast", BroadcastOp);
HVD_CPU_KERNEL("HorovodBroadcastInplaceResource", BroadcastInplaceResourceOp);
HVD_CPU_KERNEL("HorovodReducescatter", ReducescatterOp);
HVD_CPU_KERNEL("HorovodGroupedReducescatter", ReducescatterOp);
HVD_CPU_KERNEL("HorovodAlltoall", AlltoallOp);
HVD_CPU_KERNEL("HorovodJoin", JoinOp);
HVD_CPU_KERNEL("HorovodSize", Topology<TopologyOp::What::kSize>);
HVD_CPU_KERNEL("HorovodLocalSize", Topology<TopologyOp::What::kLocalSize>);
HVD_CPU_KERNEL("HorovodRank", Topology<TopologyOp::What::kRank>);
HVD_CPU_KERNEL("HorovodLocalRank", Topology<TopologyOp::What::kLocalRank>);
HVD_CPU_KERNEL("HorovodProcessSetIncluded", Topology<TopologyOp::What::kIncluded>);

#if HVD_TF_GPU
// The same kernels on GPUs. Alltoall's splits, join's result and the
// topology values are small host-side integers.
#define HVD_GPU_KERNEL(BUILDER, CLASS) REGISTER_KERNEL_BUILDER(BUILDER.Device(::tensorflow::DEVICE_GPU), CLASS)

HVD_GPU_KERNEL(Name("HorovodAllreduce"), AllreduceOp);
HVD_GPU_KERNEL(Name("HorovodGroupedAllreduce"), AllreduceOp);
HVD_GPU_KERNEL(Name("HorovodAllgather"), AllgatherOp);
HVD_GPU_KERNEL(Name("HorovodGroupedAllgather"), AllgatherOp);
HVD_GPU_KERNEL(Name("HorovodBroadcast"), BroadcastOp);
HVD_GPU_KERNEL(Name("HorovodBroadcastInplaceResource"), BroadcastInplaceResourceOp);
HVD_GPU_KERNEL(Name("HorovodReducescatter"), ReducescatterOp);
HVD_GPU_KERNEL(Name("HorovodGroupedReducescatter"), ReducescatterOp);
HVD_GPU_KERNEL(Name("HorovodAlltoall").HostMemory("splits").HostMemory("received_splits"), AlltoallOp);
HVD_GPU_KERNEL(Name("HorovodJoin").HostMemory("output"), JoinOp);
HVD_GPU_KERNEL(Name("HorovodSize").HostMemory("output"), Topology<TopologyOp::What::kSize>);
HVD_GPU_KERNEL(Name("HorovodLocalSize").HostMemory("output"), Topology<TopologyOp::What::kLocalSize>);
HVD_GPU_KERNEL(Name("HorovodRank").HostMemory("output"), Topology<TopologyOp::What::kRank>);
HVD_GPU_KERNEL(Name("HorovodLocalRank").HostMemory("output"), Topology<TopologyOp::What::kLocalRank>);
HVD_GPU_KERNEL(Name("HorovodProcessSetIncluded").HostMemory("output"), Topology<TopologyOp::What::kIncluded>);
#endif

}  // namespace
}  // namespace hvd_tf
