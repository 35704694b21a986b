// core_calls.cc - the C-ABI glue declared in core_calls.h.
#include "core_calls.h"

#include <utility>

namespace hvd_tf {

absl::Status StatusFromError(hvd_error* e, std::string_view op_type, OpTypePrefix prefix) {
  if (e == nullptr) return absl::OkStatus();
  ErrorPtr owned(e);
  size_t len = 0;
  const char* msg = hvd_error_get_message(e, &len);
  std::string text(msg, len);
  absl::StatusCode code;
  switch (hvd_error_get_code(e)) {
    case HVD_ERROR_PRECONDITION:
    case HVD_ERROR_NOT_INITIALIZED:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case HVD_ERROR_INVALID_ARGUMENT:
    case HVD_ERROR_DUPLICATE_NAME:
    case HVD_ERROR_UNSUPPORTED:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      code = absl::StatusCode::kUnknown;
      break;
  }
  if (prefix == OpTypePrefix::kEveryMessage || code == absl::StatusCode::kUnknown) {
    text = Cat(op_type, ": ", text);
  }
  return absl::Status(code, text);
}

TensorView::TensorView(TensorView&& other) noexcept : shape(std::move(other.shape)), tensor(other.tensor) {
  if (tensor.shape != nullptr) tensor.shape = shape.data();
}

void TensorView::Set(void* data, DLDataType dtype, const int64_t* dims, size_t ndim, DLDevice device) {
  shape.assign(dims, dims + ndim);
  tensor.data = data;
  tensor.device = device;
  tensor.ndim = static_cast<int32_t>(shape.size());
  tensor.dtype = dtype;
  tensor.shape = shape.data();
  tensor.strides = nullptr;  // compact row-major
  tensor.byte_offset = 0;
}

hvd_tensor_args TensorArgs(const DLTensor* input, DLTensor* output, std::string_view name) {
  hvd_tensor_args t = HVD_TENSOR_ARGS_INIT;
  t.input = input;
  t.output = output;
  t.name = name.data();
  t.name_len = name.size();
  return t;
}

std::string MemberName(std::string_view name, size_t i, size_t count) {
  return count > 1 ? Cat(name, "_", i) : std::string(name);
}

std::string EngineName(std::string_view node_name, bool ignore_name_scope) {
  if (ignore_name_scope) {
    auto slash = node_name.rfind('/');
    if (slash != std::string_view::npos) node_name = node_name.substr(slash + 1);
  }
  return std::string(node_name);
}

absl::Status EnqueueAndWait(std::string_view op_type, hvd_enqueue_args* args, Outcome* outcome) {
  args->struct_size = HVD_ENQUEUE_ARGS_STRUCT_SIZE;
  args->flags |= HVD_ENQUEUE_CALLER_WAITS | HVD_ENQUEUE_ROOT_RANK_GLOBAL | HVD_ENQUEUE_SCALE_FACTORS_AS_GIVEN;
  hvd_handle* raw = nullptr;
  if (hvd_error* e = hvd_enqueue(args, &raw)) return StatusFromError(e, op_type, OpTypePrefix::kEveryMessage);
  HandlePtr handle(raw);
  if (hvd_error* e = hvd_handle_wait(handle.get(), -1.0)) {
    return StatusFromError(e, op_type, OpTypePrefix::kEveryMessage);
  }
  if (outcome != nullptr) {
    hvd_result r = HVD_RESULT_INIT;
    if (hvd_error* e = hvd_handle_get_result(handle.get(), &r)) {
      return StatusFromError(e, op_type, OpTypePrefix::kEveryMessage);
    }
    outcome->last_joined_rank = r.last_joined_rank;
    outcome->received_splits.assign(r.received_splits, r.received_splits + r.num_received_splits);
  }
  return absl::OkStatus();
}

int32_t AllocIntoTargets(void* ctx, size_t index, int32_t ndim, const int64_t* shape, DLDataType, void** data) {
  auto* t = static_cast<ResultTargets*>(ctx);
  if (index >= t->targets.size()) return 1;
  const std::vector<int64_t>& expected = t->targets[index].shape;
  std::vector<int64_t> got(shape, shape + ndim);
  if (got != expected) {
    t->mismatch = Cat("the negotiated result of tensor ", index, " has shape [", Join(got, ","),
                               "] but this XLA program was compiled for [", Join(expected, ","),
                               "]: a rank changed a first dimension without every rank recompiling");
    return 1;
  }
  *data = t->targets[index].data;
  return 0;
}

}  // namespace hvd_tf
