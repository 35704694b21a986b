// shm_copy.cc - see shm_copy.h.
#include "transport/shm/shm_copy.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvd {

namespace {

// Below this memcpy is the vector code itself (glibc turns to `rep movsb`
// at 2,112 bytes).
constexpr size_t kVectorFromBytes = 2048;

using CopyFn = void (*)(void*, const void*, size_t);

void copy_memcpy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

#if defined(__x86_64__)
// Both loops copy up to `dst`'s next multiple of the vector size first, so
// that every store is aligned, then whole blocks of four vectors; memcpy
// copies the ends. kStream: non-temporal stores, which send the copy to
// memory rather than into this CPU's cache; the fence orders them before
// whatever tells a reader to look.
template <bool kStream>
void store16(unsigned char* d, __m128i v) {
  if constexpr (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), v);
  } else {
    _mm_store_si128(reinterpret_cast<__m128i*>(d), v);
  }
}

template <bool kStream>
__attribute__((target("avx2"))) void store32(unsigned char* d, __m256i v) {
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), v);
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(d), v);
  }
}

template <bool kStream>
void copy_sse2(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    store16<kStream>(d + i, a);
    store16<kStream>(d + i + 16, b);
    store16<kStream>(d + i + 32, c);
    store16<kStream>(d + i + 48, e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  if constexpr (kStream) _mm_sfence();
}

template <bool kStream>
__attribute__((target("avx2"))) void copy_avx2(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  const size_t head = (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    store32<kStream>(d + i, a);
    store32<kStream>(d + i + 32, b);
    store32<kStream>(d + i + 64, c);
    store32<kStream>(d + i + 96, e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  if constexpr (kStream) _mm_sfence();
}
#endif

template <bool kStream>
CopyFn choose_copy() {
  const char* env = std::getenv("HVD_SHM_COPY");
  if (!kStream && env != nullptr && std::strcmp(env, "memcpy") == 0) return copy_memcpy;
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? copy_avx2<kStream> : copy_sse2<kStream>;
#else
  return copy_memcpy;
#endif
}

const CopyFn kVectorCopy = choose_copy<false>();
const CopyFn kStreamCopy = choose_copy<true>();

}  // namespace

void shm_copy(void* dst, const void* src, size_t bytes) {
  if (bytes < kVectorFromBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  kVectorCopy(dst, src, bytes);
}

void shm_stream_copy(void* dst, const void* src, size_t bytes) {
  if (bytes < kVectorFromBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  kStreamCopy(dst, src, bytes);
}

}  // namespace hvd
