// data_plane.cc - HostDataPlane (see data_plane.h).
#include "engine/data_plane.h"

#include <cstring>

#include "engine/handle.h"
#include "reduce/reduce.h"
#include "transport/communicator.h"

namespace hvd {

void HostDataPlane::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

size_t HostDataPlane::fused_piece_bytes(const Communicator& comm, size_t bytes) const {
  return comm.fused_piece_bytes(bytes);
}

void HostDataPlane::zero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

void HostDataPlane::copy_scaled(const CopySpec* copies, size_t n, DataType dtype, double factor) {
  const size_t esize = dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) {
    const CopySpec& c = copies[i];
    if (factor != 1.0) scale_copy(c.dst, c.src, c.count, dtype, factor);
    else copy(c.dst, c.src, c.count * esize);
  }
}

void* HostDataPlane::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

DLManagedTensor* HostDataPlane::make_owned(const std::vector<int64_t>& shape, DataType dtype) {
  return make_owned_tensor(shape, dtype);
}

}  // namespace hvd
