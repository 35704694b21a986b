// host_result_pool.cc - see host_result_pool.h.
#include "engine/host_result_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace hvd {
namespace {

// A block is its result's size rounded up: to whole huge pages from
// kHugeBlockBytes on, which the kernel can then back with huge pages (fewer,
// larger faults) at a cost of at most 1/8 more memory; below that to 64 KiB,
// so that a result just over 1 MiB does not hold (and, with huge pages, touch)
// twice its size. A freed block serves the next result that rounds the same.
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeBlockBytes = size_t{16} << 20;
constexpr size_t kSmallGranule = size_t{64} << 10;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t block_capacity(size_t bytes) {
  return round_up(bytes, bytes >= kHugeBlockBytes ? kHugePageBytes : kSmallGranule);
}

void unmap(void* data, size_t capacity) { ::munmap(data, capacity); }

size_t capacity_from_environment() {
  const char* text = std::getenv("HVD_RESULT_POOL_BYTES");
  if (text == nullptr || *text == '\0') return HostResultPool::kDefaultCapacityBytes;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 0) {
    HVD_LOG(kWarning, "HVD_RESULT_POOL_BYTES=" << text << " is not a byte count (a whole number >= 0); using "
                                               << HostResultPool::kDefaultCapacityBytes);
    return HostResultPool::kDefaultCapacityBytes;
  }
  return static_cast<size_t>(value);
}

}  // namespace

HostResultPool::~HostResultPool() { clear(); }

HostResultPool& HostResultPool::instance() {
  // Never destroyed: results may be freed by the caller's runtime during
  // process exit, after static destructors would have run.
  static HostResultPool* pool = new HostResultPool(capacity_from_environment());
  return *pool;
}

void* HostResultPool::allocate(size_t bytes, size_t* capacity) {
  const size_t wanted = block_capacity(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The most recently freed block of exactly this size: its pages are the
    // likeliest to be resident still.
    for (size_t i = kept_.size(); i-- > 0;) {
      if (kept_[i].capacity != wanted) continue;
      void* data = kept_[i].data;
      kept_bytes_ -= wanted;
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
      *capacity = wanted;
      return data;
    }
  }
  void* data = ::mmap(nullptr, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  // Fewer, larger page faults when the result is first written (a hint: the
  // kernel may ignore it).
  if (wanted % kHugePageBytes == 0) ::madvise(data, wanted, MADV_HUGEPAGE);
#endif
  *capacity = wanted;
  return data;
}

void HostResultPool::release(void* data, size_t capacity) {
  std::vector<Block> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capacity <= capacity_) {
      while (kept_bytes_ + capacity > capacity_) {
        evicted.push_back(kept_.front());
        kept_bytes_ -= kept_.front().capacity;
        kept_.erase(kept_.begin());
      }
      kept_.push_back({data, capacity});
      kept_bytes_ += capacity;
      data = nullptr;
    }
  }
  // Unmapping a large block takes a while: not under the lock.
  for (const Block& b : evicted) unmap(b.data, b.capacity);
  if (data != nullptr) unmap(data, capacity);
}

void HostResultPool::clear() {
  std::vector<Block> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kept.swap(kept_);
    kept_bytes_ = 0;
  }
  for (const Block& b : kept) unmap(b.data, b.capacity);
}

size_t HostResultPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_bytes_;
}

size_t HostResultPool::kept_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_.size();
}

}  // namespace hvd
