// executor.cc - see executor.h.
#include "engine/executor.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/error.h"
#include "engine/timeline.h"
#include "ops/reduce.h"
#include "transport/communicator.h"

namespace hvd {
namespace {

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

ReduceOp transport_op(int32_t op) {
  switch (op) {
    case HVD_OP_MIN: return ReduceOp::kMin;
    case HVD_OP_MAX: return ReduceOp::kMax;
    case HVD_OP_PRODUCT: return ReduceOp::kProduct;
    default: return ReduceOp::kSum;  // Sum, Average
  }
}

}  // namespace

Executor::Executor(Communicator& comm, Timeline* timeline) : comm_(comm), timeline_(timeline) {
  // "hierarchical(shm+tcp)" -> "HIERARCHICAL": activity names stay short and
  // read like Horovod's (MPI_ALLREDUCE, GLOO_ALLREDUCE, ...).
  for (char c : comm_.transport_name()) {
    if (!std::isalnum(static_cast<unsigned char>(c))) break;
    transport_ += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
}

void Executor::activity_start(const Response& r, const std::string& activity) {
  if (timeline_ == nullptr || !timeline_->active()) return;
  for (const auto& n : r.names) timeline_->activity_start(n, activity);
}

void Executor::activity_end(const Response& r) {
  if (timeline_ == nullptr || !timeline_->active()) return;
  for (const auto& n : r.names) timeline_->activity_end(n);
}

void* Executor::result_buffer(const LocalTensor& local, const std::vector<int64_t>& shape, DataType dtype,
                              std::string* alloc_error) {
  size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  auto scratch = [&]() -> void* {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  };
  if (local.handle == nullptr) return scratch();
  TensorSlot& slot = local.handle->tensors[local.index];
  if (slot.output != nullptr) return slot.result_data = slot.output;
  if (local.handle->alloc != nullptr) {
    void* data = nullptr;
    int32_t rc = local.handle->alloc(local.handle->alloc_ctx, local.index, static_cast<int32_t>(shape.size()),
                                     shape.data(), dtype_to_dlpack(dtype), &data);
    if (rc != 0 || (data == nullptr && bytes > 0)) {
      *alloc_error = "the caller's allocator failed (code " + std::to_string(rc) + ") for the result of '" +
                     slot.meta.name + "'";
      return scratch();
    }
    return slot.result_data = data;
  }
  slot.owned_result = make_owned_tensor(shape, dtype);
  return slot.result_data = slot.owned_result->dl_tensor.data;
}

void Executor::run(const Response& r, const std::vector<LocalTensor>& locals) {
  if (timeline_ != nullptr && timeline_->active()) {
    for (const auto& n : r.names) timeline_->op_start(n, collective_upper_name(r.collective));
  }
  switch (r.collective) {
    case Collective::kAllreduce:
      allreduce(r, locals);
      break;
    case Collective::kBarrier:
      activity_start(r, "BARRIER");
      comm_.barrier();
      activity_end(r);
      for (const auto& l : locals) {
        if (l.handle != nullptr) handle_complete_tensor(l.handle, l.index, nullptr);
      }
      break;
    default:
      for (size_t i = 0; i < r.names.size(); ++i) {
        if (r.collective == Collective::kAllgather) allgather(r, i, locals[i]);
        else if (r.collective == Collective::kBroadcast) broadcast(r, i, locals[i]);
        else if (r.collective == Collective::kAlltoall) alltoall(r, i, locals[i]);
        else if (r.collective == Collective::kReducescatter) reducescatter(r, i, locals[i]);
      }
  }
  if (timeline_ != nullptr && timeline_->active()) {
    for (const auto& n : r.names) timeline_->op_end(n);
  }
}

static void complete(const LocalTensor& local, const std::string& alloc_error) {
  if (local.handle == nullptr) return;
  if (alloc_error.empty()) {
    handle_complete_tensor(local.handle, local.index, nullptr);
  } else {
    Error e(ErrorCode::kInternal, alloc_error);
    handle_complete_tensor(local.handle, local.index, &e);
  }
}

void Executor::allreduce(const Response& r, const std::vector<LocalTensor>& locals) {
  const size_t esize = dtype_size(r.dtype);
  const double pre = r.prescale;
  double post = r.postscale;
  if (r.reduce_op == HVD_OP_AVERAGE) post /= static_cast<double>(comm_.size());
  const ReduceOp op = transport_op(r.reduce_op);
  std::vector<std::string> alloc_errors(r.names.size());
  std::vector<void*> outputs(r.names.size());
  std::vector<size_t> counts(r.names.size());
  size_t total = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    counts[i] = static_cast<size_t>(num_elements(r.shapes[i]));
    total += counts[i];
  }
  // Inputs first: outputs of a joined rank live in scratch, so compute them
  // after the fusion buffer decision.
  auto input_of = [&](size_t i) -> const void* {
    return locals[i].handle ? locals[i].handle->tensors[locals[i].index].input : nullptr;
  };
  if (r.names.size() == 1) {
    void* out = result_buffer(locals[0], r.shapes[0], r.dtype, &alloc_errors[0]);
    const void* in = input_of(0);
    if (in == nullptr) std::memset(out, 0, counts[0] * esize);
    else if (pre != 1.0) scale_copy(out, in, counts[0], r.dtype, pre);
    else if (in != out) std::memcpy(out, in, counts[0] * esize);
    activity_start(r, transport_ + "_ALLREDUCE");
    comm_.allreduce(out, counts[0], r.dtype, op);
    activity_end(r);
    if (post != 1.0) scale_buffer(out, counts[0], r.dtype, post);
    complete(locals[0], alloc_errors[0]);
    return;
  }
  auto* buffer = static_cast<unsigned char*>(fusion_.get(total * esize));
  activity_start(r, "MEMCPY_IN_FUSION_BUFFER");
  size_t offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const void* in = input_of(i);
    void* dst = buffer + offset * esize;
    if (in == nullptr) std::memset(dst, 0, counts[i] * esize);
    else if (pre != 1.0) scale_copy(dst, in, counts[i], r.dtype, pre);
    else std::memcpy(dst, in, counts[i] * esize);
    offset += counts[i];
  }
  activity_end(r);
  activity_start(r, transport_ + "_ALLREDUCE");
  comm_.allreduce(buffer, total, r.dtype, op);
  activity_end(r);
  activity_start(r, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (locals[i].handle != nullptr) {
      void* out = result_buffer(locals[i], r.shapes[i], r.dtype, &alloc_errors[i]);
      const void* src = buffer + offset * esize;
      if (post != 1.0) scale_copy(out, src, counts[i], r.dtype, post);
      else std::memcpy(out, src, counts[i] * esize);
    }
    offset += counts[i];
  }
  activity_end(r);
  for (size_t i = 0; i < r.names.size(); ++i) complete(locals[i], alloc_errors[i]);
}

void Executor::allgather(const Response& r, size_t i, const LocalTensor& local) {
  const auto& shape = r.shapes[i];
  const auto& dims = r.first_dims[i];
  const size_t row_bytes = static_cast<size_t>(row_elements(shape)) * dtype_size(r.dtype);
  std::vector<size_t> bytes(dims.size());
  int64_t rows = 0;
  for (size_t m = 0; m < dims.size(); ++m) {
    bytes[m] = static_cast<size_t>(dims[m]) * row_bytes;
    rows += dims[m];
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = rows;
  std::string alloc_error;
  void* out = result_buffer(local, out_shape, r.dtype, &alloc_error);
  const void* in = local.handle ? local.handle->tensors[local.index].input : nullptr;
  activity_start(r, transport_ + "_ALLGATHER");
  comm_.allgatherv(in, out, bytes);
  activity_end(r);
  complete(local, alloc_error);
}

void Executor::broadcast(const Response& r, size_t i, const LocalTensor& local) {
  const size_t bytes = static_cast<size_t>(num_elements(r.shapes[i])) * dtype_size(r.dtype);
  std::string alloc_error;
  void* out = result_buffer(local, r.shapes[i], r.dtype, &alloc_error);
  const void* in = local.handle->tensors[local.index].input;
  if (comm_.rank() == r.root_rank && in != out) std::memcpy(out, in, bytes);
  activity_start(r, transport_ + "_BCAST");
  comm_.broadcast(out, bytes, r.root_rank);
  activity_end(r);
  complete(local, alloc_error);
}

void Executor::alltoall(const Response& r, size_t i, const LocalTensor& local) {
  TensorSlot& slot = local.handle->tensors[local.index];
  const auto& shape = slot.meta.shape;
  const int size = comm_.size();
  const size_t row_bytes = static_cast<size_t>(row_elements(shape)) * dtype_size(r.dtype);
  std::vector<int64_t> send_rows = slot.splits;
  if (send_rows.empty()) send_rows.assign(static_cast<size_t>(size), shape[0] / size);
  // Everyone first learns how many rows it receives from each member.
  std::vector<int64_t> recv_rows(static_cast<size_t>(size), 0);
  std::vector<size_t> eight(static_cast<size_t>(size), sizeof(int64_t));
  activity_start(r, transport_ + "_ALLTOALL");
  comm_.alltoallv(send_rows.data(), eight, recv_rows.data(), eight);
  std::vector<size_t> send_bytes(static_cast<size_t>(size)), recv_bytes(static_cast<size_t>(size));
  int64_t total_rows = 0;
  for (int m = 0; m < size; ++m) {
    send_bytes[static_cast<size_t>(m)] = static_cast<size_t>(send_rows[static_cast<size_t>(m)]) * row_bytes;
    recv_bytes[static_cast<size_t>(m)] = static_cast<size_t>(recv_rows[static_cast<size_t>(m)]) * row_bytes;
    total_rows += recv_rows[static_cast<size_t>(m)];
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = total_rows;
  std::string alloc_error;
  void* out = result_buffer(local, out_shape, r.dtype, &alloc_error);
  comm_.alltoallv(slot.input, send_bytes, out, recv_bytes);
  activity_end(r);
  slot.received_splits = std::move(recv_rows);
  complete(local, alloc_error);
}

void Executor::reducescatter(const Response& r, size_t i, const LocalTensor& local) {
  TensorSlot& slot = local.handle->tensors[local.index];
  const auto& shape = r.shapes[i];
  const int size = comm_.size();
  const int64_t rows = shape[0];
  const int64_t row = row_elements(shape);
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int m = 0; m < size; ++m) {
    int64_t my_rows = rows / size + (m < rows % size ? 1 : 0);
    counts[static_cast<size_t>(m)] = static_cast<size_t>(my_rows * row);
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = rows / size + (comm_.rank() < rows % size ? 1 : 0);
  std::string alloc_error;
  void* out = result_buffer(local, out_shape, r.dtype, &alloc_error);
  const void* in = slot.input;
  std::vector<unsigned char> scaled;
  size_t total = static_cast<size_t>(rows * row);
  if (r.prescale != 1.0) {
    scaled.resize(total * dtype_size(r.dtype));
    scale_copy(scaled.data(), in, total, r.dtype, r.prescale);
    in = scaled.data();
  }
  activity_start(r, transport_ + "_REDUCESCATTER");
  comm_.reducescatter(in, out, counts, r.dtype, transport_op(r.reduce_op));
  activity_end(r);
  double post = r.postscale;
  if (r.reduce_op == HVD_OP_AVERAGE) post /= static_cast<double>(size);
  if (post != 1.0) scale_buffer(out, counts[static_cast<size_t>(comm_.rank())], r.dtype, post);
  complete(local, alloc_error);
}

}  // namespace hvd
