// chacha20.h - the ChaCha20 stream cipher (RFC 8439, section 2.4), our own
// implementation, which encrypts the data plane under HOROVOD_DATA_ENCRYPT.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvd {

// One 64-byte keystream block for (key, nonce, counter) (RFC 8439, 2.3).
void chacha20_block(const uint8_t key[32], const uint8_t nonce[12], uint32_t counter, uint8_t out[64]);

// XORs `size` bytes of `data` in place with the keystream that starts at
// block `counter`: encryption and decryption are the same call. A (key,
// nonce) pair must never encrypt two different messages.
void chacha20_xor(const uint8_t key[32], const uint8_t nonce[12], uint32_t counter, uint8_t* data, size_t size);

}  // namespace hvd
