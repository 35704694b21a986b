// socket.h - an owned, connected TCP socket with deadline-bounded blocking
// I/O. Every failure (EOF, reset, no progress before the deadline) throws
// Error(kInternal) whose message names the peer (set_peer_name).
//
// A protected socket (protect(), HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT)
// is still a byte stream to its callers, but on the wire every piece a send
// call hands over becomes one frame:
//   length u32 (big-endian, 1..kMaxFramePayload) | payload | MAC[32]
//   MAC = HMAC-SHA256(send key, sequence u64 | length u32 | payload)
// with the payload ChaCha20-encrypted first under HOROVOD_DATA_ENCRYPT (the
// nonce is the sequence number: a key never encrypts twice under one nonce).
// The sequence number counts frames per direction from 0 and never travels,
// so a frame dropped, replayed, reordered or moved to another link fails the
// MAC. The receiver hands out no byte of a frame before its MAC checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>

#include "common/interrupt.h"

namespace hvd {

// What a socket throws when the peer closed or reset the connection. A peer
// that fails closes its links on purpose, so that no one waits for it; the
// reason, when it has one, follows on its control channel (see
// ProcessSetRuntime::fail), and is worth more than this.
class LinkClosed : public Error {
 public:
  using Error::Error;
};

// What a peer link's bytes get after the handshake.
enum class DataProtection { kNone = 0, kAuthenticate = 1, kEncrypt = 2 };

// Per-link, per-direction keys (32 bytes each), derived at the handshake.
struct LinkKeys {
  std::string send_mac, receive_mac;
  std::string send_cipher, receive_cipher;  // used by kEncrypt only
};

// The largest payload of one protected frame: bounds what a receiver buffers
// before the MAC is checked, and keeps a pipelined ring's steps fine-grained.
constexpr size_t kMaxFramePayload = 64 * 1024;

class Socket {
 public:
  Socket();
  explicit Socket(int fd);
  ~Socket();  // out of line: Protection is complete only in socket.cc
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  void set_peer_name(std::string name) { peer_name_ = std::move(name); }
  const std::string& peer_name() const { return peer_name_; }

  // Block until all bytes are sent/received. `timeout_seconds` bounds the
  // time without progress (not the total), so a large transfer over a slow
  // but live link never times out.
  void send_all(const void* data, size_t size, double timeout_seconds);
  void recv_all(void* data, size_t size, double timeout_seconds);
  // recv_all() that calls `interrupt` about every kInterruptSliceSeconds
  // while nothing arrives; whatever it throws ends the wait.
  void recv_all(void* data, size_t size, double timeout_seconds, const Interrupt& interrupt);
  // Non-blocking variants: return bytes moved (0 if it would block); throw
  // on EOF or error.
  size_t send_some(const void* data, size_t size);
  size_t recv_some(void* data, size_t size);
  // True when recv would not block (data, EOF or error pending).
  bool readable(double timeout_seconds);
  // recv(2)'s contract on the byte stream: > 0 bytes read, 0 at end of file,
  // -1 with errno set (EAGAIN when nothing is ready). Throws Error(kInternal)
  // when a protected frame fails authentication.
  ssize_t read_some(void* data, size_t size);

  // From now on every byte both ways is framed and MACed (and encrypted for
  // kEncrypt); both ends must switch at the same point of the stream.
  void protect(DataProtection mode, const LinkKeys& keys);
  DataProtection protection() const;

 private:
  struct Protection;
  size_t send_framed(const void* data, size_t size);
  ssize_t read_framed(void* data, size_t size);

  int fd_ = -1;
  std::string peer_name_;
  std::unique_ptr<Protection> protection_;
};

}  // namespace hvd
