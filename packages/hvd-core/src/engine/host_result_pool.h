// host_result_pool.h - the memory of large host results the core hands out
// (allgather, alltoall, reducescatter outputs the caller did not allocate),
// kept for reuse after the caller frees them.
//
// Why: a result the size of a whole gathered tensor is a fresh mapping each
// time (malloc maps anything this large anew), so every call pays a page
// fault and the zeroing of every page; on a 2-CPU VM that was half of a
// 64 MiB allgather's time. A training loop gathers the same sizes step after
// step, so the freed block of the last step fits the next one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace hvd {

class HostResultPool {
 public:
  // Results smaller than this come from malloc, which recycles them itself.
  static constexpr size_t kMinPooledBytes = size_t{1} << 20;
  static constexpr size_t kDefaultCapacityBytes = size_t{256} << 20;

  // Keeps at most `capacity_bytes` of freed blocks (0: keeps none).
  explicit HostResultPool(size_t capacity_bytes) : capacity_(capacity_bytes) {}
  ~HostResultPool();
  HostResultPool(const HostResultPool&) = delete;
  HostResultPool& operator=(const HostResultPool&) = delete;

  // The process-wide pool; its capacity is HVD_RESULT_POOL_BYTES when set
  // (read once, at the first large result), kDefaultCapacityBytes otherwise.
  static HostResultPool& instance();

  // 64-byte-aligned memory for `bytes` (> 0); nullptr when out of memory.
  // `*capacity` receives what to pass to release().
  void* allocate(size_t bytes, size_t* capacity);
  // Gives back what allocate() returned: kept for reuse while the pool has
  // room (the oldest kept blocks are unmapped to make it), unmapped otherwise.
  void release(void* data, size_t capacity);
  // Unmaps every kept block.
  void clear();

  size_t kept_bytes() const;
  size_t kept_blocks() const;

 private:
  struct Block {
    void* data;
    size_t capacity;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Block> kept_;  // oldest first
  size_t kept_bytes_ = 0;
};

}  // namespace hvd
