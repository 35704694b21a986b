// chacha20.cc - ChaCha20 (RFC 8439): 20 rounds of quarter-rounds on a 4x4
// matrix of 32-bit words (constants, key, counter, nonce), little-endian.
#include "auth/chacha20.h"

#include <cstring>

namespace hvd {
namespace {

inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

inline uint32_t load_le(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

inline void quarter_round(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d) {
  a += b; d ^= a; d = rotl(d, 16);
  c += d; b ^= c; b = rotl(b, 12);
  a += b; d ^= a; d = rotl(d, 8);
  c += d; b ^= c; b = rotl(b, 7);
}

}  // namespace

void chacha20_block(const uint8_t key[32], const uint8_t nonce[12], uint32_t counter, uint8_t out[64]) {
  uint32_t input[16];
  input[0] = 0x61707865;  // "expand 32-byte k"
  input[1] = 0x3320646e;
  input[2] = 0x79622d32;
  input[3] = 0x6b206574;
  for (int i = 0; i < 8; ++i) input[4 + i] = load_le(key + 4 * i);
  input[12] = counter;
  for (int i = 0; i < 3; ++i) input[13 + i] = load_le(nonce + 4 * i);
  uint32_t x[16];
  std::memcpy(x, input, sizeof(x));
  for (int round = 0; round < 10; ++round) {  // 10 double rounds: columns, then diagonals
    quarter_round(x[0], x[4], x[8], x[12]);
    quarter_round(x[1], x[5], x[9], x[13]);
    quarter_round(x[2], x[6], x[10], x[14]);
    quarter_round(x[3], x[7], x[11], x[15]);
    quarter_round(x[0], x[5], x[10], x[15]);
    quarter_round(x[1], x[6], x[11], x[12]);
    quarter_round(x[2], x[7], x[8], x[13]);
    quarter_round(x[3], x[4], x[9], x[14]);
  }
  for (int i = 0; i < 16; ++i) {
    uint32_t v = x[i] + input[i];
    out[4 * i] = static_cast<uint8_t>(v);
    out[4 * i + 1] = static_cast<uint8_t>(v >> 8);
    out[4 * i + 2] = static_cast<uint8_t>(v >> 16);
    out[4 * i + 3] = static_cast<uint8_t>(v >> 24);
  }
}

void chacha20_xor(const uint8_t key[32], const uint8_t nonce[12], uint32_t counter, uint8_t* data, size_t size) {
  uint8_t block[64];
  while (size > 0) {
    chacha20_block(key, nonce, counter++, block);
    size_t n = size < 64 ? size : 64;
    for (size_t i = 0; i < n; ++i) data[i] ^= block[i];
    data += n;
    size -= n;
  }
}

}  // namespace hvd
