// host_result_pool_test.cc - the pool behind large host results: a freed
// block serves the next result of its size, live blocks are never handed out
// twice, the capacity bounds what is kept (oldest unmapped first), and
// results allocated through make_owned_tensor are writable end to end.
#include <cstring>
#include <string>
#include <vector>

#include "engine/handle.h"
#include "engine/host_result_pool.h"
#include "test_harness.h"

using namespace hvd;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}  // namespace

HVD_TEST(result_pool_hands_a_freed_block_to_the_next_result_of_its_size) {
  HostResultPool pool(64 * kMiB);
  size_t cap = 0;
  void* a = pool.allocate(3 * kMiB - 100, &cap);
  EXPECT_TRUE(a != nullptr);
  EXPECT_EQ(cap, 3 * kMiB);  // whole 64 KiB granules below 16 MiB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, uintptr_t{0});
  std::memset(a, 0x5a, 3 * kMiB);
  pool.release(a, cap);
  EXPECT_EQ(pool.kept_blocks(), size_t{1});
  EXPECT_EQ(pool.kept_bytes(), 3 * kMiB);
  size_t cap2 = 0;
  void* b = pool.allocate(3 * kMiB, &cap2);  // rounds to the same granules
  EXPECT_TRUE(b == a);
  EXPECT_EQ(cap2, cap);
  EXPECT_EQ(pool.kept_blocks(), size_t{0});
  // A different size does not take it.
  pool.release(b, cap2);
  size_t cap3 = 0;
  void* c = pool.allocate(6 * kMiB, &cap3);
  EXPECT_TRUE(c != a);
  EXPECT_EQ(pool.kept_blocks(), size_t{1});
  pool.release(c, cap3);
  EXPECT_EQ(pool.kept_bytes(), 9 * kMiB);
}

HVD_TEST(result_pool_rounds_small_blocks_finely_and_large_ones_to_huge_pages) {
  // A result just over 1 MiB must not take a whole 2 MiB huge page; from
  // 16 MiB blocks are whole huge pages.
  HostResultPool pool(64 * kMiB);
  size_t cap = 0;
  void* a = pool.allocate(kMiB + 1, &cap);
  EXPECT_EQ(cap, kMiB + 64 * 1024);
  pool.release(a, cap);
  void* b = pool.allocate(16 * kMiB + 1, &cap);
  EXPECT_EQ(cap, 18 * kMiB);
  pool.release(b, cap);
}

HVD_TEST(result_pool_never_hands_out_a_live_block_twice) {
  HostResultPool pool(64 * kMiB);
  std::vector<void*> live;
  std::vector<size_t> caps(4);
  for (size_t i = 0; i < 4; ++i) live.push_back(pool.allocate(2 * kMiB, &caps[i]));
  for (size_t i = 0; i < 4; ++i) {
    for (size_t j = i + 1; j < 4; ++j) EXPECT_TRUE(live[i] != live[j]);
  }
  for (size_t i = 0; i < 4; ++i) pool.release(live[i], caps[i]);
  EXPECT_EQ(pool.kept_blocks(), size_t{4});
  // Handed back out: four distinct blocks again, the most recently freed first.
  size_t cap = 0;
  void* first = pool.allocate(2 * kMiB, &cap);
  EXPECT_TRUE(first == live[3]);
  pool.release(first, cap);
}

HVD_TEST(result_pool_keeps_at_most_its_capacity_unmapping_the_oldest) {
  HostResultPool pool(8 * kMiB);
  size_t c1 = 0, c2 = 0, c3 = 0, c4 = 0;
  void* a = pool.allocate(4 * kMiB, &c1);
  void* b = pool.allocate(4 * kMiB, &c2);
  void* c = pool.allocate(4 * kMiB, &c3);
  void* too_big = pool.allocate(10 * kMiB, &c4);
  pool.release(a, c1);
  pool.release(b, c2);
  EXPECT_EQ(pool.kept_bytes(), 8 * kMiB);
  pool.release(c, c3);  // a (the oldest) goes
  EXPECT_EQ(pool.kept_bytes(), 8 * kMiB);
  EXPECT_EQ(pool.kept_blocks(), size_t{2});
  pool.release(too_big, c4);  // larger than the whole capacity: unmapped at once
  EXPECT_EQ(pool.kept_blocks(), size_t{2});
  size_t cap = 0;
  void* again = pool.allocate(4 * kMiB, &cap);
  EXPECT_TRUE(again == c);
  pool.release(again, cap);
  pool.clear();
  EXPECT_EQ(pool.kept_blocks(), size_t{0});
  EXPECT_EQ(pool.kept_bytes(), size_t{0});
}

HVD_TEST(result_pool_of_capacity_zero_keeps_nothing) {
  HostResultPool pool(0);
  size_t cap = 0;
  void* a = pool.allocate(kMiB, &cap);
  EXPECT_TRUE(a != nullptr);
  pool.release(a, cap);
  EXPECT_EQ(pool.kept_blocks(), size_t{0});
}

HVD_TEST(owned_results_are_writable_and_freed_by_their_deleter) {
  // Above and below the pooled size, empty too: each comes back as a
  // 64-byte-aligned, writable DLPack tensor of the asked shape, freed by the
  // deleter. A small result lies in the same block as its DLManagedTensor:
  // filling it must leave the tensor's own fields alone.
  for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{300000}}) {
    DLManagedTensor* t = make_owned_tensor({rows, 4}, DataType::kFloat32);
    EXPECT_EQ(t->dl_tensor.ndim, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->dl_tensor.data) % 64, uintptr_t{0});
    const DLManagedTensor before = *t;
    std::memset(t->dl_tensor.data, 0xff, static_cast<size_t>(rows) * 16);
    EXPECT_EQ(t->dl_tensor.ndim, 2);
    EXPECT_EQ(t->dl_tensor.shape[0], rows);
    EXPECT_EQ(t->dl_tensor.shape[1], int64_t{4});
    EXPECT_TRUE(t->deleter == before.deleter && t->manager_ctx == before.manager_ctx);
    t->deleter(t);
  }
}

HVD_TEST(a_result_the_memory_cannot_hold_is_an_error_naming_its_size) {
  // 2^50 float32 elements (4 PiB): more than a process's address space, so
  // the pool's mapping fails; the caller gets an error, not a null result.
  const int64_t rows = int64_t{1} << 50;
  bool threw = false;
  try {
    make_owned_tensor({rows}, DataType::kFloat32);
  } catch (const Error& e) {
    threw = true;
    EXPECT_TRUE(e.code() == ErrorCode::kInternal);
    EXPECT_TRUE(std::string(e.what()).find("out of memory allocating a 4503599627370496-byte result") !=
                std::string::npos);
  }
  EXPECT_TRUE(threw);
}
