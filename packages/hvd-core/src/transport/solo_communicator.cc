// solo_communicator.cc - see solo_communicator.h.
#include "transport/solo_communicator.h"

#include <cstring>

#include "reduce/reduce.h"

namespace hvd {

void SoloCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  if (dtype != DataType::kBool || count == 0) return;
  const void* sources[1] = {data};
  reduce_many(data, sources, 1, count, dtype, op);
}

void SoloCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  if (bytes_per_rank[0] > 0 && in != out) std::memcpy(out, in, bytes_per_rank[0]);
}

void SoloCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                 const std::vector<size_t>&) {
  if (send_bytes[0] > 0 && in != out) std::memcpy(out, in, send_bytes[0]);
}

void SoloCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                                     ReduceOp op) {
  if (counts[0] == 0) return;
  if (in != out) std::memmove(out, in, counts[0] * dtype_size(dtype));
  if (dtype == DataType::kBool) {
    const void* sources[1] = {out};
    reduce_many(out, sources, 1, counts[0], dtype, op);
  }
}

}  // namespace hvd
