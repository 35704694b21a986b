// executor.h - runs one Response on this rank: stages tensors (fusion
// buffer, scale factors, zeros for a joined rank), calls the communicator,
// writes results and completes the tensors' handles.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/fusion_buffer.h"
#include "engine/handle.h"
#include "engine/message.h"

namespace hvd {

class Communicator;
class Timeline;

// This rank's tensor for one name of a response; handle == nullptr when the
// rank has joined and takes part in an allreduce with zeros.
struct LocalTensor {
  hvd_handle* handle = nullptr;
  size_t index = 0;
};

class Executor {
 public:
  Executor(Communicator& comm, Timeline* timeline);
  // Executes `response` (kind kExecute, not join). Tensor-local problems (a
  // failed caller allocation) complete that tensor with an error but the
  // rank still takes part, so the other ranks never wait. Communicator
  // failures (Error kInternal) propagate: the process set has failed.
  void run(const Response& response, const std::vector<LocalTensor>& locals);

 private:
  void allreduce(const Response& r, const std::vector<LocalTensor>& locals);
  // op=Adasum on the fused, prescaled buffer (`counts` elements per tensor).
  void adasum(const Response& r, void* buffer, const std::vector<size_t>& counts);
  void allgather(const Response& r, size_t i, const LocalTensor& local);
  void broadcast(const Response& r, size_t i, const LocalTensor& local);
  void alltoall(const Response& r, size_t i, const LocalTensor& local);
  void reducescatter(const Response& r, size_t i, const LocalTensor& local);
  // Where tensor `local` gets its result of `shape`: the caller's output,
  // the caller's allocator, or a core-owned tensor; scratch on failure.
  void* result_buffer(const LocalTensor& local, const std::vector<int64_t>& shape, DataType dtype,
                      std::string* alloc_error);
  void activity_start(const Response& r, const std::string& activity);
  void activity_end(const Response& r);

  Communicator& comm_;
  Timeline* timeline_;
  std::string transport_;  // timeline prefix of transport activities: "SHM", "TCP", ...
  FusionBuffer fusion_;
  std::vector<unsigned char> scratch_;
  std::vector<unsigned char> adasum_scratch_;  // received blocks (and their float32 copies)
};

}  // namespace hvd
