// executor.h - runs one Response on this rank: stages tensors (fusion
// buffer, scale factors, zeros for a joined rank), calls the communicator,
// writes results and completes the tensors' handles - on the data plane
// where the tensors live (host memory, or a GPU).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "adasum/adasum.h"
#include "engine/data_plane.h"
#include "engine/handle.h"
#include "engine/message.h"
#include "transport/communicator.h"

namespace hvd {

class Timeline;

class Executor {
 public:
  // `comm` is the process set's CPU communicator: it carries the small
  // host-side exchanges (alltoall splits) and Adasum, whatever plane the
  // tensors are on.
  Executor(Communicator& comm, Timeline* timeline);
  // Executes `response` (kind kExecute, not join) on `plane`. Tensor-local
  // problems (a failed caller allocation) complete that tensor with an error
  // but the rank still takes part, so the other ranks never wait.
  // Communicator failures (Error kInternal) propagate: the process set has
  // failed.
  void run(const Response& response, const std::vector<LocalTensor>& locals, DataPlane& plane);

 private:
  void allreduce(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane);
  // A fused allreduce of `counts` elements per tensor (packed back to back,
  // `total` in all) cut into pieces of `piece` elements, each packed,
  // reduced and unpacked while it is in the cache.
  void allreduce_in_pieces(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane,
                           Communicator& comm, const std::vector<size_t>& counts, size_t total, size_t piece);
  // A fused allreduce of host tensors in a set of one member, whose sum,
  // average, minimum, maximum or product of each tensor is the tensor
  // itself: each output gets its (scaled) input, without the fusion buffer.
  // False, having changed nothing, where the general way must run (results
  // the engine or an allocator makes, tensors that overlap, bool).
  bool allreduce_alone(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane,
                       const Communicator& comm, const std::vector<size_t>& counts);
  void allgather(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane);
  // Several tensors in one allgatherv: each member's tensors packed back to
  // back, gathered once, then unpacked into every tensor's result.
  void allgather_fused(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane);
  void broadcast(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane);
  void alltoall(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane);
  void reducescatter(const Response& r, size_t i, const LocalTensor& local, DataPlane& plane);
  // Several tensors in one reducescatter: every member's share of each tensor
  // packed together (prescaled), reduced once, this member's shares unpacked.
  void reducescatter_fused(const Response& r, const std::vector<LocalTensor>& locals, DataPlane& plane);
  // Where tensor `local` gets its result of `shape`: the caller's output,
  // the caller's allocator, or a core-owned tensor; scratch on failure.
  void* result_buffer(DataPlane& plane, const LocalTensor& local, const std::vector<int64_t>& shape,
                      DataType dtype, std::string* alloc_error);
  // "SHM_ALLREDUCE", "NCCL_ALLGATHER", ... started for tensors [first, last)
  // of r (all by default) when the timeline records.
  void activity_start(const Response& r, const Communicator& comm, const char* what, size_t first = 0,
                      size_t last = SIZE_MAX);
  void activity_start(const Response& r, const std::string& activity, size_t first = 0, size_t last = SIZE_MAX);
  void activity_end(const Response& r, size_t first = 0, size_t last = SIZE_MAX);

  Communicator& comm_;
  Timeline* timeline_;
  Adasum adasum_;  // op=Adasum, on host memory whatever the plane
  std::vector<CopySpec> copies_;  // a fused response's packing list, kept between responses
  // allreduce_in_pieces' results, and a piece's parts of tensors (elements
  // [from, to) of `tensor` at element `at` of the piece), kept between responses.
  std::vector<void*> outputs_;
  struct PiecePart {
    size_t tensor, from, to, at;
  };
  std::vector<PiecePart> parts_;
  // Whether the memory of some of a fused response's tensors (inputs and
  // outputs) overlaps: a tensor given twice, overlapping views.
  bool tensors_overlap(const std::vector<LocalTensor>& locals, const std::vector<size_t>& counts, size_t esize);
  // A piece reduced where its parts lie in the tensors (Communicator::
  // allreduce_parts; host memory: only the host plane cuts pieces), without
  // the fusion buffer.
  void reduce_piece_in_tensors(const std::vector<LocalTensor>& locals, Communicator& comm, const Response& r,
                               const std::vector<PiecePart>& parts, size_t len, double post, size_t first,
                               size_t last);
  std::vector<ArrayPart> in_parts_, out_parts_;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_;  // the parts' memory [begin, end), to find overlaps
};

}  // namespace hvd
