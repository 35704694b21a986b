// fusion_buffer.h - the per-process-set staging buffer into which small
// allreduce tensors are packed so they travel as one collective. It grows
// to the largest fused response seen (bounded by HOROVOD_FUSION_THRESHOLD)
// and is reused, so steady-state training allocates nothing.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace hvd {

class FusionBuffer {
 public:
  ~FusionBuffer() { std::free(data_); }
  void* get(size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      capacity_ = ((bytes + 4095) / 4096) * 4096;
      data_ = std::aligned_alloc(64, capacity_);
      if (data_ == nullptr) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace hvd
