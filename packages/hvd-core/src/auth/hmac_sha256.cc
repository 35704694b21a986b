// hmac_sha256.cc - SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), hex
// encoding, constant-time comparison and random nonces for authentication.
#include "auth/hmac_sha256.h"

#include <sys/random.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HVD_SHA256_X86_EXTENSIONS 1
#endif

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace hvd {
namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#ifdef HVD_SHA256_X86_EXTENSIONS
// The x86 SHA extensions run the same rounds about five times faster than
// the portable code, which matters once the data plane MACs every byte. They
// are chosen at run time (cpuid), so the library still runs on CPUs without
// them and needs no build flag. The state is kept as the instructions want
// it: ABEF and CDGH in two registers.
bool cpu_has_sha_extensions() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && (b & (1u << 29));
}

__attribute__((target("sha,sse4.1,ssse3"))) void compress_with_sha_extensions(uint32_t state[8],
                                                                              const uint8_t* block) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  const __m128i abef_start = abef, cdgh_start = cdgh;
  __m128i w[16];  // the message schedule, four words per entry
  for (int i = 0; i < 16; ++i) {
    if (i < 4) {
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * i)), byte_swap);
    } else {
      __m128i t = _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]), _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
      w[i] = _mm_sha256msg2_epu32(t, w[i - 1]);
    }
    __m128i words = _mm_add_epi32(w[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRoundConstants + 4 * i)));
    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, words);
    abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(words, 0x0E));
  }
  abef = _mm_add_epi32(abef, abef_start);
  cdgh = _mm_add_epi32(cdgh, cdgh_start);
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

#endif

// Whether compress() uses the CPU's SHA extensions (tests turn them off to
// check the portable rounds against the same vectors).
std::atomic<bool>& use_cpu_extensions() {
#ifdef HVD_SHA256_X86_EXTENSIONS
  static std::atomic<bool> use{cpu_has_sha_extensions()};
#else
  static std::atomic<bool> use{false};
#endif
  return use;
}

}  // namespace

Sha256::Sha256() {
  static constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                           0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memcpy(state_, kInitial, sizeof(state_));
}

void Sha256::update(const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    size_t take = 64 - buffered_;
    if (take > size) take = size;
    std::memcpy(block_ + buffered_, bytes, take);
    buffered_ += take;
    bytes += take;
    size -= take;
    if (buffered_ < 64) return;
    compress(block_);
    buffered_ = 0;
  }
  // Whole blocks straight from the input: the data plane MACs megabytes.
  for (; size >= 64; bytes += 64, size -= 64) compress(bytes);
  std::memcpy(block_, bytes, size);
  buffered_ = size;
}

Digest256 Sha256::finish() {
  uint64_t bit_length = total_bytes_ * 8;
  uint8_t tail[72] = {0x80};
  size_t pad = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) tail[pad + i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  update(tail, pad + 8);
  Digest256 out;
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = static_cast<uint8_t>(state_[i] >> 24);
    out[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    out[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    out[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  return out;
}

void Sha256::compress(const uint8_t* block) {
#ifdef HVD_SHA256_X86_EXTENSIONS
  if (use_cpu_extensions().load(std::memory_order_relaxed)) {
    compress_with_sha_extensions(state_, block);
    return;
  }
#endif
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) |
           (uint32_t(block[4 * i + 2]) << 8) | uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + big_s1 + choose + kRoundConstants[i] + w[i];
    uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = big_s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

bool sha256_use_cpu_extensions(bool wanted) {
#ifdef HVD_SHA256_X86_EXTENSIONS
  bool available = cpu_has_sha_extensions();
#else
  bool available = false;
#endif
  use_cpu_extensions().store(wanted && available);
  return wanted && available;
}

Digest256 sha256(const void* data, size_t size) {
  Sha256 hasher;
  hasher.update(data, size);
  return hasher.finish();
}

HmacSha256Key::HmacSha256Key(const std::string& key) {
  uint8_t key_block[64] = {0};
  if (key.size() > 64) {
    Digest256 hashed = sha256(key.data(), key.size());
    std::memcpy(key_block, hashed.data(), hashed.size());
  } else {
    std::memcpy(key_block, key.data(), key.size());
  }
  uint8_t inner_pad[64], outer_pad[64];
  for (int i = 0; i < 64; ++i) {
    inner_pad[i] = key_block[i] ^ 0x36;
    outer_pad[i] = key_block[i] ^ 0x5c;
  }
  inner_.update(inner_pad, 64);
  outer_.update(outer_pad, 64);
}

Digest256 HmacSha256Key::finish(Sha256 inner) const {
  Digest256 inner_digest = inner.finish();
  Sha256 outer = outer_;
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

Digest256 hmac_sha256(const std::string& key, const void* data, size_t size) {
  HmacSha256Key keyed(key);
  Sha256 inner = keyed.start();
  inner.update(data, size);
  return keyed.finish(inner);
}

std::string to_hex(const void* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  std::string out(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // The length is not secret (signatures have a fixed size); the content is,
  // so every byte is visited regardless of where the first mismatch is.
  if (a.size() != b.size()) return false;
  volatile uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference = difference | static_cast<uint8_t>(a[i] ^ b[i]);
  }
  return difference == 0;
}

std::string random_hex(size_t num_bytes) {
  std::string raw(num_bytes, '\0');
  size_t filled = 0;
  while (filled < num_bytes) {
    ssize_t got = getrandom(&raw[filled], num_bytes - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorCode::kInternal,
                  std::string("getrandom failed: ") + std::strerror(errno));
    }
    filled += static_cast<size_t>(got);
  }
  return to_hex(raw.data(), raw.size());
}

}  // namespace hvd
