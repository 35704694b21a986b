// adasum.h - Adasum as an algorithm over a Communicator: an allreduce that
// combines the members' vectors by how they align instead of summing them.
// It needs only the transport's alltoallv and allgatherv and works on host
// memory; whoever holds the tensors elsewhere (a GPU) stages them through
// the host around the call.
#pragma once

#include <cstddef>
#include <vector>

#include "common/dtype.h"

namespace hvd {

class Communicator;

// Adasum's arithmetic is defined for floating point only: float16,
// bfloat16, float32 and float64.
bool adasum_supports(DataType dtype);

class Adasum {
 public:
  // Collective over `comm`: every member passes the same `counts` and
  // `dtype`. `buffer` is host memory holding this member's tensors back to
  // back (counts[t] elements each); on return it holds, on every member,
  // their Adasum combination, each tensor weighted on its own. Transport
  // failures propagate as the communicator throws them (Error kInternal).
  void allreduce(Communicator& comm, void* buffer, const std::vector<size_t>& counts, DataType dtype);

 private:
  // Received blocks and their float32 copies, kept between calls: fresh
  // pages cost more than the arithmetic.
  std::vector<unsigned char> scratch_;
};

}  // namespace hvd
