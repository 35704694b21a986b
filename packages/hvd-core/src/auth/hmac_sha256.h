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

Digest256 sha256(const void* data, size_t size);
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
