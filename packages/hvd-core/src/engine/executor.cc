// executor.cc - see executor.h.
#include "engine/executor.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/error.h"
#include "engine/timeline.h"
#include "reduce/reduce.h"
#include "transport/communicator.h"

namespace hvd {
namespace {

int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

Executor::Executor(Communicator& comm, Timeline* timeline) : comm_(comm), timeline_(timeline) {}

void Executor::activity_start(const Response& r, const Communicator& comm, const char* what, size_t first,
                              size_t last) {
  if (timeline_ == nullptr || !timeline_->active()) return;
  // "hierarchical(shm+tcp)" -> "HIERARCHICAL": activity names stay short and
  // read like Horovod's (MPI_ALLREDUCE, NCCL_ALLREDUCE, GLOO_ALLREDUCE, ...).
  std::string activity;
  for (char c : comm.transport_name_for(what)) {
    if (!std::isalnum(static_cast<unsigned char>(c))) break;
    activity += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  activity_start(r, activity + "_" + what, first, last);
}

void Executor::activity_start(const Response& r, const std::string& activity, size_t first, size_t last) {
  if (timeline_ == nullptr || !timeline_->active()) return;
  for (size_t i = first; i < std::min(last, r.names.size()); ++i) timeline_->activity_start(r.names[i], activity);
}

void Executor::activity_end(const Response& r, size_t first, size_t last) {
  if (timeline_ == nullptr || !timeline_->active()) return;
  for (size_t i = first; i < std::min(last, r.names.size()); ++i) timeline_->activity_end(r.names[i]);
}

void* Executor::result_buffer(DataPlane& plane, const LocalTensor& local, const std::vector<int64_t>& shape,
                              DataType dtype, std::string* alloc_error) {
  size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  if (local.handle == nullptr) return plane.scratch(bytes);
  TensorSlot& slot = local.handle->tensors[local.index];
  if (slot.output != nullptr) return slot.result_data = slot.output;
  if (local.handle->alloc != nullptr) {
    void* data = nullptr;
    int32_t rc = local.handle->alloc(local.handle->alloc_ctx, local.index, static_cast<int32_t>(shape.size()),
                                     shape.data(), dtype_to_dlpack(dtype), &data);
    if (rc != 0 || (data == nullptr && bytes > 0)) {
      *alloc_error = "the caller's allocator failed (code " + std::to_string(rc) + ") for the result of '" +
                     slot.meta.name + "'";
      return plane.scratch(bytes);
    }
    return slot.result_data = data;
  }
  try {
    slot.owned_result = plane.make_owned(shape, dtype);
  } catch (const Error& e) {
    *alloc_error = std::string(e.what()) + " (the result of '" + slot.meta.name + "')";
    return plane.scratch(bytes);
  }
  return slot.result_data = slot.owned_result->dl_tensor.data;
}

void Executor::run(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane) {
  if (timeline_ != nullptr && timeline_->active()) {
    for (const auto& n : r.names) timeline_->op_start(n, collective_upper_name(r.collective));
  }
  switch (r.collective) {
    case Collective::kAllreduce:
      allreduce(r, locals, plane);
      break;
    case Collective::kBarrier:
      activity_start(r, "BARRIER");
      comm_.barrier();
      activity_end(r);
      for (const auto& l : locals) plane.complete(l, nullptr);
      break;
    case Collective::kAllgather:
      if (r.names.size() > 1 && r.device == Device::kCpu) {
        allgather_fused(r, locals, plane);
        break;
      }
      [[fallthrough]];
    case Collective::kReducescatter:
      if (r.collective == Collective::kReducescatter && r.names.size() > 1 && r.device == Device::kCpu) {
        reducescatter_fused(r, locals, plane);
        break;
      }
      [[fallthrough]];
    default:
      for (size_t i = 0; i < r.names.size(); ++i) {
        if (r.collective == Collective::kAllgather) allgather(r, i, locals[i], plane);
        else if (r.collective == Collective::kBroadcast) broadcast(r, i, locals[i], plane);
        else if (r.collective == Collective::kAlltoall) alltoall(r, i, locals[i], plane);
        else if (r.collective == Collective::kReducescatter) reducescatter(r, i, locals[i], plane);
      }
  }
  if (timeline_ != nullptr && timeline_->active()) {
    for (const auto& n : r.names) timeline_->op_end(n);
  }
}

static void complete(DataPlane& plane, const LocalTensor& local, const std::string& alloc_error) {
  if (alloc_error.empty()) {
    plane.complete(local, nullptr);
  } else {
    Error e(ErrorCode::kInternal, alloc_error);
    plane.complete(local, &e);
  }
}

void Executor::allreduce(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane) {
  const size_t esize = dtype_size(r.dtype);
  const double pre = r.prescale;
  const double post = result_scale(r.reduce_op, r.postscale, comm_.size());
  if (!r.inline_result.empty()) {
    // The coordinator reduced the inputs the requests carried.
    std::string alloc_error;
    void* out = result_buffer(plane, locals[0], r.shapes[0], r.dtype, &alloc_error);
    const CopySpec result{out, r.inline_result.data(), r.inline_result.size() / esize};
    plane.copy_scaled(&result, 1, r.dtype, post);
    complete(plane, locals[0], alloc_error);
    return;
  }
  const ReduceOp op = transport_op(r.reduce_op);
  const bool adasum_op = r.reduce_op == HVD_OP_ADASUM;
  Communicator& comm = plane.comm(r.dtype, !adasum_op);
  const size_t n = r.names.size();
  std::vector<std::string> alloc_errors(n);
  std::vector<size_t> counts(n);
  for (size_t i = 0; i < n; ++i) counts[i] = static_cast<size_t>(num_elements(r.shapes[i]));
  auto input_of = [&](size_t i) -> const void* {
    return locals[i].handle ? locals[i].handle->tensors[locals[i].index].input : nullptr;
  };
  if (n == 1 && !adasum_op) {
    void* out = result_buffer(plane, locals[0], r.shapes[0], r.dtype, &alloc_errors[0]);
    const void* in = input_of(0);
    activity_start(r, comm, "ALLREDUCE");
    // What the reduction reads: the input, or `out` holding it prescaled
    // (or a joined rank's zeros).
    const void* source = in;
    if (in == nullptr) {
      plane.zero(out, counts[0] * esize);
      source = out;
    } else if (pre != 1.0) {
      const CopySpec prescaled{out, in, counts[0]};
      plane.copy_scaled(&prescaled, 1, r.dtype, pre);
      source = out;
    }
    const bool scaled = post != 1.0 && comm.allreduce_scaled(source, out, counts[0], r.dtype, op, post);
    if (!scaled && (source == out || !comm.allreduce_out_of_place(source, out, counts[0], r.dtype, op))) {
      if (source != out) plane.copy(out, source, counts[0] * esize);
      comm.allreduce(out, counts[0], r.dtype, op);
    }
    activity_end(r);
    const CopySpec postscaled{out, out, counts[0]};
    if (post != 1.0 && !scaled) plane.copy_scaled(&postscaled, 1, r.dtype, post);
    complete(plane, locals[0], alloc_errors[0]);
    return;
  }
  if (comm.size() == 1 && !adasum_op && r.device == Device::kCpu && allreduce_alone(r, locals, plane, comm, counts)) {
    return;
  }
  size_t elements = 0;
  for (size_t c : counts) elements += c;
  const size_t piece = adasum_op ? 0 : plane.fused_piece_bytes(comm, elements * esize) / esize;
  if (piece > 0 && elements >= piece) {
    allreduce_in_pieces(r, locals, plane, comm, counts, elements, piece);
    return;
  }
  // Fused: each tensor at its offset in the fusion buffer. On a GPU the
  // offsets are rounded up to the plane's alignment, so packing copies move
  // whole vectors; Adasum's tree needs the tensors back to back.
  const size_t align = adasum_op ? 1 : std::max<size_t>(1, plane.fusion_alignment() / esize);
  std::vector<size_t> offsets(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = (total + align - 1) / align * align;
    total = offsets[i] + counts[i];
  }
  auto* buffer = static_cast<unsigned char*>(plane.fusion_buffer(total * esize));
  activity_start(r, "MEMCPY_IN_FUSION_BUFFER");
  std::vector<CopySpec>& copies = copies_;
  copies.clear();
  for (size_t i = 0; i < n; ++i) {
    const void* in = input_of(i);
    void* dst = buffer + offsets[i] * esize;
    if (in == nullptr) plane.zero(dst, counts[i] * esize);
    else copies.push_back({dst, in, counts[i]});
  }
  plane.copy_scaled(copies.data(), copies.size(), r.dtype, pre);
  activity_end(r);
  if (adasum_op) {
    activity_start(r, comm, "ADASUM_ALLREDUCE");
    // The plane stages its memory through the host (a GPU) or hands the
    // buffer over as it is.
    void* host = plane.host_view(buffer, total * esize);
    adasum_.allreduce(comm_, host, counts, r.dtype);
    plane.write_back(buffer, host, total * esize);
  } else {
    activity_start(r, comm, "ALLREDUCE");
    comm.allreduce(buffer, total, r.dtype, op);
  }
  activity_end(r);
  activity_start(r, "MEMCPY_OUT_FUSION_BUFFER");
  copies.clear();
  for (size_t i = 0; i < n; ++i) {
    // A joined rank's results and failed allocations are not kept.
    if (locals[i].handle == nullptr) continue;
    void* out = result_buffer(plane, locals[i], r.shapes[i], r.dtype, &alloc_errors[i]);
    if (alloc_errors[i].empty()) copies.push_back({out, buffer + offsets[i] * esize, counts[i]});
  }
  plane.copy_scaled(copies.data(), copies.size(), r.dtype, post);
  activity_end(r);
  for (size_t i = 0; i < n; ++i) complete(plane, locals[i], alloc_errors[i]);
}

bool Executor::allreduce_alone(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane,
                               const Communicator& comm, const std::vector<size_t>& counts) {
  // Packing and unpacking a response of one member's gradients cost a
  // single-process job (hvd.size() == 1) a copy there and back of every
  // byte: 1.2 ms for the training benchmark's 102 tensors (6.6 MB).
  if (r.dtype == DataType::kBool) return false;  // the general way keeps bools 0 or 1
  const size_t esize = dtype_size(r.dtype);
  const size_t n = counts.size();
  outputs_.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (locals[i].handle == nullptr) return false;
    const TensorSlot& slot = locals[i].handle->tensors[locals[i].index];
    if (slot.input == nullptr || slot.output == nullptr) return false;
    outputs_[i] = slot.output;
  }
  if (tensors_overlap(locals, counts, esize)) return false;
  const double pre = r.prescale;
  const double post = result_scale(r.reduce_op, r.postscale, comm.size());
  activity_start(r, comm, "ALLREDUCE");
  // As the general way scales: the inputs by `pre`, then the results by `post`.
  std::vector<CopySpec>& copies = copies_;
  copies.clear();
  for (size_t i = 0; i < n; ++i) {
    const void* in = locals[i].handle->tensors[locals[i].index].input;
    if (in != outputs_[i] || pre != 1.0) copies.push_back({outputs_[i], in, counts[i]});
  }
  plane.copy_scaled(copies.data(), copies.size(), r.dtype, pre);
  if (post != 1.0) {
    copies.clear();
    for (size_t i = 0; i < n; ++i) copies.push_back({outputs_[i], outputs_[i], counts[i]});
    plane.copy_scaled(copies.data(), copies.size(), r.dtype, post);
  }
  activity_end(r);
  for (size_t i = 0; i < n; ++i) {
    locals[i].handle->tensors[locals[i].index].result_data = outputs_[i];
    complete(plane, locals[i], "");
  }
  return true;
}

void Executor::allreduce_in_pieces(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane,
                                   Communicator& comm, const std::vector<size_t>& counts, size_t total,
                                   size_t piece) {
  const size_t esize = dtype_size(r.dtype);
  const size_t n = counts.size();
  std::vector<std::string> alloc_errors(n);
  outputs_.assign(n, nullptr);  // null: nothing keeps the result (a joined rank, a failed allocation)
  for (size_t i = 0; i < n; ++i) {
    if (locals[i].handle == nullptr) continue;
    void* out = result_buffer(plane, locals[i], r.shapes[i], r.dtype, &alloc_errors[i]);
    if (alloc_errors[i].empty()) outputs_[i] = out;
  }
  const double pre = r.prescale;
  const double post = result_scale(r.reduce_op, r.postscale, comm.size());
  std::vector<CopySpec>& copies = copies_;
  std::vector<PiecePart>& parts = parts_;
  // Tensors that share memory (one given twice, overlapping views): a result
  // written after one piece would be read as input by a later one, so their
  // pieces are packed into a buffer for the whole response and the results
  // written after the last. Otherwise, where every tensor has its input and
  // its output (not so for a joined rank or a failed allocation), pieces are
  // reduced where they lie in the tensors. A rank decides alone: every way
  // makes the same calls and scales alike.
  const bool shared = tensors_overlap(locals, counts, esize);
  bool in_tensors = !shared && pre == 1.0;
  for (size_t i = 0; i < n && in_tensors; ++i) {
    in_tensors = outputs_[i] != nullptr && locals[i].handle->tensors[locals[i].index].input != nullptr;
  }
  // Asked for at the first piece that is packed: where every piece is reduced
  // in the tensors (a whole response in one piece among them) none is.
  unsigned char* fusion = nullptr;
  // The packed layout, walked piece by piece: the next piece starts at
  // element `offset` of tensor `next`.
  size_t next = 0, offset = 0;
  for (size_t start = 0; start < total; start += piece) {
    const size_t len = std::min(piece, total - start);
    parts.clear();
    for (size_t at = 0; at < len;) {
      const size_t take = std::min(counts[next] - offset, len - at);
      if (take > 0) parts.push_back({next, offset, offset + take, at});
      at += take;
      offset += take;
      if (offset == counts[next]) {
        ++next;
        offset = 0;
      }
    }
    const size_t first = parts.front().tensor, last = parts.back().tensor + 1;  // for the timeline
    if (in_tensors && comm.allreduces_parts(len * esize)) {
      reduce_piece_in_tensors(locals, comm, r, parts, len, post, first, last);
      continue;
    }
    if (fusion == nullptr) {
      fusion = static_cast<unsigned char*>(plane.fusion_buffer((shared ? total : std::min(piece, total)) * esize));
    }
    unsigned char* buffer = shared ? fusion + start * esize : fusion;
    activity_start(r, "MEMCPY_IN_FUSION_BUFFER", first, last);
    copies.clear();
    for (const PiecePart& p : parts) {
      const auto* in = static_cast<const unsigned char*>(
          locals[p.tensor].handle ? locals[p.tensor].handle->tensors[locals[p.tensor].index].input : nullptr);
      if (in == nullptr) plane.zero(buffer + p.at * esize, (p.to - p.from) * esize);
      else copies.push_back({buffer + p.at * esize, in + p.from * esize, p.to - p.from});
    }
    plane.copy_scaled(copies.data(), copies.size(), r.dtype, pre);
    activity_end(r, first, last);
    activity_start(r, comm, "ALLREDUCE", first, last);
    // Scaled as allreduce_parts scales, where other ranks may have reduced
    // this piece where it lies (each rank scales the share it reduces).
    const bool scaled = post != 1.0 && comm.allreduce_scaled(buffer, buffer, len, r.dtype,
                                                             transport_op(r.reduce_op), post);
    if (!scaled) comm.allreduce(buffer, len, r.dtype, transport_op(r.reduce_op));
    activity_end(r, first, last);
    if (shared) {
      const CopySpec postscaled{buffer, buffer, len};
      if (!scaled && post != 1.0) plane.copy_scaled(&postscaled, 1, r.dtype, post);
      continue;
    }
    activity_start(r, "MEMCPY_OUT_FUSION_BUFFER", first, last);
    copies.clear();
    for (const PiecePart& p : parts) {
      auto* out = static_cast<unsigned char*>(outputs_[p.tensor]);
      if (out != nullptr) copies.push_back({out + p.from * esize, buffer + p.at * esize, p.to - p.from});
    }
    plane.copy_scaled(copies.data(), copies.size(), r.dtype, scaled ? 1.0 : post);
    activity_end(r, first, last);
  }
  if (shared) {
    activity_start(r, "MEMCPY_OUT_FUSION_BUFFER");
    copies.clear();
    for (size_t i = 0, at = 0; i < n; at += counts[i++]) {
      if (outputs_[i] != nullptr) copies.push_back({outputs_[i], fusion + at * esize, counts[i]});
    }
    plane.copy_scaled(copies.data(), copies.size(), r.dtype, 1.0);
    activity_end(r);
  }
  for (size_t i = 0; i < n; ++i) complete(plane, locals[i], alloc_errors[i]);
}

bool Executor::tensors_overlap(const std::vector<LocalTensor>& locals, const std::vector<size_t>& counts,
                               size_t esize) {
  spans_.clear();
  for (size_t i = 0; i < counts.size(); ++i) {
    const void* in = locals[i].handle ? locals[i].handle->tensors[locals[i].index].input : nullptr;
    const auto in_at = reinterpret_cast<uintptr_t>(in), out_at = reinterpret_cast<uintptr_t>(outputs_[i]);
    if (in_at != 0) spans_.emplace_back(in_at, in_at + counts[i] * esize);
    if (out_at != 0 && out_at != in_at) spans_.emplace_back(out_at, out_at + counts[i] * esize);
  }
  std::sort(spans_.begin(), spans_.end());
  for (size_t i = 1; i < spans_.size(); ++i) {
    if (spans_[i].first < spans_[i - 1].second) return true;
  }
  return false;
}

void Executor::reduce_piece_in_tensors(const std::vector<LocalTensor>& locals, Communicator& comm, const Response& r,
                                       const std::vector<PiecePart>& parts, size_t len, double post, size_t first,
                                       size_t last) {
  const size_t esize = dtype_size(r.dtype);
  in_parts_.clear();
  out_parts_.clear();
  for (const PiecePart& p : parts) {
    const LocalTensor& local = locals[p.tensor];
    auto* in = static_cast<unsigned char*>(const_cast<void*>(local.handle->tensors[local.index].input));
    auto* out = static_cast<unsigned char*>(outputs_[p.tensor]);
    in_parts_.push_back({in + p.from * esize, p.at, p.to - p.from});
    out_parts_.push_back({out + p.from * esize, p.at, p.to - p.from});
  }
  activity_start(r, comm, "ALLREDUCE", first, last);
  comm.allreduce_parts(in_parts_, out_parts_, len, r.dtype, transport_op(r.reduce_op), post);
  activity_end(r, first, last);
}

void Executor::allgather(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane) {
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
  void* out = result_buffer(plane, local, out_shape, r.dtype, &alloc_error);
  const void* in = local.handle ? local.handle->tensors[local.index].input : nullptr;
  Communicator& comm = plane.comm(r.dtype, false);
  activity_start(r, comm, "ALLGATHER");
  comm.allgatherv(in, out, bytes);
  activity_end(r);
  complete(plane, local, alloc_error);
}

void Executor::allgather_fused(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane) {
  const size_t n = r.names.size();
  const size_t members = r.first_dims[0].size();
  const size_t me = static_cast<size_t>(comm_.rank());
  std::vector<size_t> row_bytes(n);
  std::vector<size_t> member_bytes(members, 0);  // what each member contributes, all its tensors together
  for (size_t i = 0; i < n; ++i) {
    row_bytes[i] = static_cast<size_t>(row_elements(r.shapes[i])) * dtype_size(r.dtype);
    for (size_t m = 0; m < members; ++m) member_bytes[m] += static_cast<size_t>(r.first_dims[i][m]) * row_bytes[i];
  }
  size_t total = 0;
  for (size_t b : member_bytes) total += b;
  // [this member's packed tensors | everyone's, member after member]
  const size_t gathered_at = (member_bytes[me] + 63) / 64 * 64;
  auto* buffer = static_cast<unsigned char*>(plane.fusion_buffer(gathered_at + total));
  unsigned char* gathered = buffer + gathered_at;
  activity_start(r, "MEMCPY_IN_FUSION_BUFFER");
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t bytes = static_cast<size_t>(r.first_dims[i][me]) * row_bytes[i];
    const void* in = locals[i].handle ? locals[i].handle->tensors[locals[i].index].input : nullptr;
    if (bytes) plane.copy(buffer + at, in, bytes);
    at += bytes;
  }
  activity_end(r);
  Communicator& comm = plane.comm(r.dtype, false);
  activity_start(r, comm, "ALLGATHER");
  comm.allgatherv(buffer, gathered, member_bytes);
  activity_end(r);
  activity_start(r, "MEMCPY_OUT_FUSION_BUFFER");
  std::vector<std::string> alloc_errors(n);
  std::vector<size_t> member_start(members, 0);  // where member m's block begins in `gathered`
  for (size_t m = 1; m < members; ++m) member_start[m] = member_start[m - 1] + member_bytes[m - 1];
  std::vector<size_t> within(members, 0);  // how far into its block member m's tensor i starts
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> out_shape = r.shapes[i];
    out_shape[0] = 0;
    for (size_t m = 0; m < members; ++m) out_shape[0] += r.first_dims[i][m];
    unsigned char* out = nullptr;
    if (locals[i].handle != nullptr) {
      out = static_cast<unsigned char*>(result_buffer(plane, locals[i], out_shape, r.dtype, &alloc_errors[i]));
    }
    size_t out_at = 0;
    for (size_t m = 0; m < members; ++m) {
      const size_t bytes = static_cast<size_t>(r.first_dims[i][m]) * row_bytes[i];
      if (out != nullptr && alloc_errors[i].empty() && bytes) {
        plane.copy(out + out_at, gathered + member_start[m] + within[m], bytes);
      }
      out_at += bytes;
      within[m] += bytes;
    }
  }
  activity_end(r);
  for (size_t i = 0; i < n; ++i) complete(plane, locals[i], alloc_errors[i]);
}

void Executor::reducescatter_fused(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane) {
  const size_t n = r.names.size();
  const size_t members = static_cast<size_t>(comm_.size());
  const size_t me = static_cast<size_t>(comm_.rank());
  const size_t esize = dtype_size(r.dtype);
  // share[i][m]: elements of tensor i that member m ends up with.
  std::vector<std::vector<size_t>> share(n, std::vector<size_t>(members));
  std::vector<size_t> counts(members, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = r.shapes[i][0];
    const auto row = static_cast<size_t>(row_elements(r.shapes[i]));
    for (size_t m = 0; m < members; ++m) {
      share[i][m] = static_cast<size_t>(scattered_rows(rows, comm_.size(), static_cast<int64_t>(m))) * row;
      counts[m] += share[i][m];
    }
  }
  size_t total = 0;
  for (size_t c : counts) total += c;
  auto* packed = static_cast<unsigned char*>(plane.fusion_buffer((total + counts[me]) * esize));
  unsigned char* mine = packed + total * esize;
  activity_start(r, "MEMCPY_IN_FUSION_BUFFER");
  std::vector<CopySpec>& copies = copies_;
  copies.clear();
  std::vector<size_t> taken(n, 0);  // elements of tensor i packed so far
  size_t at = 0;
  for (size_t m = 0; m < members; ++m) {
    for (size_t i = 0; i < n; ++i) {
      const auto* in = static_cast<const unsigned char*>(locals[i].handle->tensors[locals[i].index].input);
      if (share[i][m]) copies.push_back({packed + at * esize, in + taken[i] * esize, share[i][m]});
      taken[i] += share[i][m];
      at += share[i][m];
    }
  }
  plane.copy_scaled(copies.data(), copies.size(), r.dtype, r.prescale);
  activity_end(r);
  Communicator& comm = plane.comm(r.dtype, true);
  activity_start(r, comm, "REDUCESCATTER");
  comm.reducescatter(packed, mine, counts, r.dtype, transport_op(r.reduce_op));
  activity_end(r);
  const double post = result_scale(r.reduce_op, r.postscale, static_cast<int>(members));
  activity_start(r, "MEMCPY_OUT_FUSION_BUFFER");
  std::vector<std::string> alloc_errors(n);
  copies.clear();
  at = 0;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> out_shape = r.shapes[i];
    out_shape[0] = static_cast<int64_t>(share[i][me] / std::max<size_t>(1, static_cast<size_t>(row_elements(r.shapes[i]))));
    void* out = result_buffer(plane, locals[i], out_shape, r.dtype, &alloc_errors[i]);
    if (alloc_errors[i].empty() && share[i][me]) copies.push_back({out, mine + at * esize, share[i][me]});
    at += share[i][me];
  }
  plane.copy_scaled(copies.data(), copies.size(), r.dtype, post);
  activity_end(r);
  for (size_t i = 0; i < n; ++i) complete(plane, locals[i], alloc_errors[i]);
}

void Executor::broadcast(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane) {
  const size_t bytes = static_cast<size_t>(num_elements(r.shapes[i])) * dtype_size(r.dtype);
  std::string alloc_error;
  void* out = result_buffer(plane, local, r.shapes[i], r.dtype, &alloc_error);
  const void* in = local.handle->tensors[local.index].input;
  if (comm_.rank() == r.root_rank && in != out) plane.copy(out, in, bytes);
  Communicator& comm = plane.comm(r.dtype, false);
  activity_start(r, comm, "BCAST");
  comm.broadcast(out, bytes, r.root_rank);
  activity_end(r);
  complete(plane, local, alloc_error);
}

void Executor::alltoall(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane) {
  TensorSlot& slot = local.handle->tensors[local.index];
  const auto& shape = slot.meta.shape;
  const int size = comm_.size();
  const size_t row_bytes = static_cast<size_t>(row_elements(shape)) * dtype_size(r.dtype);
  std::vector<int64_t> send_rows = slot.splits;
  if (send_rows.empty()) send_rows.assign(static_cast<size_t>(size), shape[0] / size);
  Communicator& comm = plane.comm(r.dtype, false);
  // Everyone first learns how many rows it receives from each member (host
  // memory, over the CPU communicator, whatever plane the data is on).
  std::vector<int64_t> recv_rows(static_cast<size_t>(size), 0);
  std::vector<size_t> eight(static_cast<size_t>(size), sizeof(int64_t));
  activity_start(r, comm, "ALLTOALL");
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
  void* out = result_buffer(plane, local, out_shape, r.dtype, &alloc_error);
  comm.alltoallv(slot.input, send_bytes, out, recv_bytes);
  activity_end(r);
  slot.received_splits = std::move(recv_rows);
  complete(plane, local, alloc_error);
}

void Executor::reducescatter(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane) {
  TensorSlot& slot = local.handle->tensors[local.index];
  const auto& shape = r.shapes[i];
  const int size = comm_.size();
  const int64_t rows = shape[0];
  const int64_t row = row_elements(shape);
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int m = 0; m < size; ++m) {
    int64_t my_rows = scattered_rows(rows, size, m);
    counts[static_cast<size_t>(m)] = static_cast<size_t>(my_rows * row);
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = scattered_rows(rows, size, comm_.rank());
  std::string alloc_error;
  void* out = result_buffer(plane, local, out_shape, r.dtype, &alloc_error);
  const void* in = slot.input;
  const size_t total = static_cast<size_t>(rows * row);
  if (r.prescale != 1.0) {
    // A response of one tensor: the fusion buffer is free for the scaled input.
    void* scaled = plane.fusion_buffer(total * dtype_size(r.dtype));
    const CopySpec prescaled{scaled, in, total};
    plane.copy_scaled(&prescaled, 1, r.dtype, r.prescale);
    in = scaled;
  }
  Communicator& comm = plane.comm(r.dtype, true);
  activity_start(r, comm, "REDUCESCATTER");
  comm.reducescatter(in, out, counts, r.dtype, transport_op(r.reduce_op));
  activity_end(r);
  const double post = result_scale(r.reduce_op, r.postscale, size);
  const size_t mine = counts[static_cast<size_t>(comm_.rank())];
  const CopySpec postscaled{out, out, mine};
  if (post != 1.0) plane.copy_scaled(&postscaled, 1, r.dtype, post);
  complete(plane, local, alloc_error);
}

}  // namespace hvd
