// hmac_sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), our own
// implementation, used to prove knowledge of the job secret on every store
// request and every peer connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd {

using Digest256 = std::array<uint8_t, 32>;

// Streaming SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Digest256 finish();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t block_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest256 sha256(const void* data, size_t size);
// SHA-256 runs on the x86 SHA extensions where the CPU has them (found at
// run time), else on portable code. For tests: choose; returns whether the
// extensions are now in use.
bool sha256_use_cpu_extensions(bool wanted);

// HMAC-SHA256 under one key for many messages: the key's pads are hashed
// once, so a message costs only its own blocks plus three (the data plane
// MACs every frame). A message may come in pieces:
//   Sha256 h = key.start(); h.update(a); h.update(b); Digest256 mac = key.finish(h);
class HmacSha256Key {
 public:
  explicit HmacSha256Key(const std::string& key);
  Sha256 start() const { return inner_; }
  Digest256 finish(Sha256 inner) const;

 private:
  Sha256 inner_, outer_;  // after absorbing the inner and outer key pads
};

Digest256 hmac_sha256(const std::string& key, const void* data, size_t size);
inline Digest256 hmac_sha256(const std::string& key, const std::string& data) {
  return hmac_sha256(key, data.data(), data.size());
}
std::string to_hex(const void* data, size_t size);
inline std::string to_hex(const Digest256& d) { return to_hex(d.data(), d.size()); }
// Constant-time comparison, so a signature check leaks nothing through timing.
bool constant_time_equal(const std::string& a, const std::string& b);
// Cryptographically random bytes (getrandom(2)), hex-encoded.
std::string random_hex(size_t num_bytes);

}  // namespace hvd
