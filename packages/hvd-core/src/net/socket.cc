// socket.cc - deadline-bounded blocking and non-blocking I/O on an owned TCP
// socket. All I/O uses MSG_DONTWAIT + poll, so the same socket serves both
// the blocking helpers and the poll-driven collective loops.
#include "net/socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "auth/chacha20.h"
#include "auth/hmac_sha256.h"
#include "common/error.h"

namespace hvd {
namespace {

[[noreturn]] void throw_io(const std::string& what, const std::string& peer, int err) {
  const std::string message = what + " " + (peer.empty() ? "<unnamed peer>" : peer) +
                              " failed: " + (err ? std::strerror(err) : "connection closed by peer");
  if (err == 0 || err == ECONNRESET || err == EPIPE) throw LinkClosed(ErrorCode::kInternal, message);
  throw_error(ErrorCode::kInternal, message);
}

// Waits for `events` up to timeout; false when the timeout passed.
bool wait_for(int fd, short events, double timeout_seconds) {
  pollfd p{fd, events, 0};
  int timeout_ms = timeout_seconds <= 0 ? 0 : static_cast<int>(timeout_seconds * 1000.0 + 0.999);
  for (;;) {
    int rc = ::poll(&p, 1, timeout_ms);
    if (rc >= 0) return rc > 0;
    if (errno != EINTR) return true;  // let the subsequent I/O call report the error
  }
}

constexpr size_t kFrameHeaderBytes = 4;
constexpr size_t kMacBytes = 32;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// HMAC(key, sequence | length | payload), the length header as sent.
Digest256 frame_mac(const HmacSha256Key& key, uint64_t sequence, const uint8_t* header, const uint8_t* payload,
                    size_t size) {
  uint8_t sequence_be[8];
  for (int i = 0; i < 8; ++i) sequence_be[i] = static_cast<uint8_t>(sequence >> (56 - 8 * i));
  Sha256 inner = key.start();
  inner.update(sequence_be, 8);
  inner.update(header, kFrameHeaderBytes);
  inner.update(payload, size);
  return key.finish(inner);
}

void nonce_of(uint64_t sequence, uint8_t nonce[12]) {
  std::memset(nonce, 0, 12);
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<uint8_t>(sequence >> (56 - 8 * i));
}

}  // namespace

// The framing state of a protected socket (see socket.h).
struct Socket::Protection {
  Protection(DataProtection m, const LinkKeys& keys)
      : mode(m), send_mac(keys.send_mac), receive_mac(keys.receive_mac) {
    if (mode == DataProtection::kEncrypt) {
      std::memcpy(send_cipher, keys.send_cipher.data(), 32);
      std::memcpy(receive_cipher, keys.receive_cipher.data(), 32);
    }
  }
  DataProtection mode;
  HmacSha256Key send_mac, receive_mac;
  uint8_t send_cipher[32] = {0}, receive_cipher[32] = {0};
  uint64_t send_sequence = 0, receive_sequence = 0;
  // The frame being sent: its bytes, how many went out, how many caller
  // bytes it carries (reported once the whole frame is out).
  std::vector<uint8_t> out;
  size_t out_sent = 0;
  size_t out_payload = 0;
  // The frame being received: header, then payload + MAC; once checked,
  // in[0, in_payload) is plaintext handed out from in_taken on.
  uint8_t header[kFrameHeaderBytes];
  size_t header_got = 0;
  std::vector<uint8_t> in;
  size_t in_got = 0;
  size_t in_payload = 0;
  size_t in_taken = 0;
  bool in_checked = false;
  std::string failure;  // once a frame failed, every later read fails the same way
};

Socket::Socket() = default;
Socket::Socket(int fd) : fd_(fd) {}
Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept
    : fd_(other.fd_), peer_name_(std::move(other.peer_name_)), protection_(std::move(other.protection_)) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_name_ = std::move(other.peer_name_);
    protection_ = std::move(other.protection_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::protect(DataProtection mode, const LinkKeys& keys) {
  if (mode == DataProtection::kNone) {
    protection_.reset();
    return;
  }
  protection_ = std::make_unique<Protection>(mode, keys);
}

DataProtection Socket::protection() const { return protection_ ? protection_->mode : DataProtection::kNone; }

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

size_t Socket::send_some(const void* data, size_t size) {
  if (size == 0) return 0;
  if (protection_) return send_framed(data, size);
  for (;;) {
    ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_io("send to", peer_name_, errno);
  }
}

size_t Socket::recv_some(void* data, size_t size) {
  if (size == 0) return 0;
  for (;;) {
    ssize_t n = read_some(data, size);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) throw_io("receive from", peer_name_, 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_io("receive from", peer_name_, errno);
  }
}

void Socket::send_all(const void* data, size_t size, double timeout_seconds) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    size_t n = send_some(bytes, size);
    if (n == 0) {
      if (!wait_for(fd_, POLLOUT, timeout_seconds)) {
        throw_error(ErrorCode::kInternal, "send to " + peer_name_ + " made no progress for " +
                                              std::to_string(timeout_seconds) + " s");
      }
      continue;
    }
    bytes += n;
    size -= n;
  }
}

void Socket::recv_all(void* data, size_t size, double timeout_seconds) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    size_t n = recv_some(bytes, size);
    if (n == 0) {
      if (!wait_for(fd_, POLLIN, timeout_seconds)) {
        throw_error(ErrorCode::kInternal, "receive from " + peer_name_ + " made no progress for " +
                                              std::to_string(timeout_seconds) + " s");
      }
      continue;
    }
    bytes += n;
    size -= n;
  }
}

void Socket::recv_all(void* data, size_t size, double timeout_seconds, const Interrupt& interrupt) {
  if (!interrupt) return recv_all(data, size, timeout_seconds);
  char* bytes = static_cast<char*>(data);
  auto last_progress = std::chrono::steady_clock::now();
  while (size > 0) {
    size_t n = recv_some(bytes, size);
    if (n == 0) {
      interrupt();
      const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress).count();
      if (idle >= timeout_seconds) {
        throw_error(ErrorCode::kInternal, "receive from " + peer_name_ + " made no progress for " +
                                              std::to_string(timeout_seconds) + " s");
      }
      wait_for(fd_, POLLIN, std::min(kInterruptSliceSeconds, timeout_seconds - idle));
      continue;
    }
    bytes += n;
    size -= n;
    last_progress = std::chrono::steady_clock::now();
  }
}

bool Socket::readable(double timeout_seconds) {
  if (protection_ && protection_->in_checked && protection_->in_taken < protection_->in_payload) return true;
  return wait_for(fd_, POLLIN, timeout_seconds);
}

ssize_t Socket::read_some(void* data, size_t size) {
  if (protection_) return read_framed(data, size);
  return ::recv(fd_, data, size, MSG_DONTWAIT);
}

// Builds one frame from the first bytes of `data` and sends what the socket
// takes. Returns the caller bytes the frame carries once all of it is out,
// 0 before: the caller then calls again, with the same bytes first, when the
// socket is writable (the frame holds its own copy, so only the count matters).
size_t Socket::send_framed(const void* data, size_t size) {
  Protection& p = *protection_;
  if (p.out_payload == 0) {
    size_t n = size < kMaxFramePayload ? size : kMaxFramePayload;
    p.out.resize(kFrameHeaderBytes + n + kMacBytes);
    uint8_t* header = p.out.data();
    uint8_t* payload = header + kFrameHeaderBytes;
    put_u32(header, static_cast<uint32_t>(n));
    std::memcpy(payload, data, n);
    if (p.mode == DataProtection::kEncrypt) {
      uint8_t nonce[12];
      nonce_of(p.send_sequence, nonce);
      chacha20_xor(p.send_cipher, nonce, 0, payload, n);
    }
    Digest256 mac = frame_mac(p.send_mac, p.send_sequence, header, payload, n);
    std::memcpy(payload + n, mac.data(), kMacBytes);
    ++p.send_sequence;
    p.out_sent = 0;
    p.out_payload = n;
  }
  while (p.out_sent < p.out.size()) {
    ssize_t n = ::send(fd_, p.out.data() + p.out_sent, p.out.size() - p.out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      p.out_sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_io("send to", peer_name_, errno);
  }
  size_t carried = p.out_payload;
  p.out_payload = 0;
  return carried;
}

// Reads at most the rest of the current frame (never into the next one, so
// whatever follows the last frame on the connection stays unread), checks
// its MAC when it is complete, and hands out its payload.
ssize_t Socket::read_framed(void* data, size_t size) {
  Protection& p = *protection_;
  if (!p.failure.empty()) throw_error(ErrorCode::kInternal, p.failure);
  for (;;) {
    if (p.in_checked) {
      size_t n = p.in_payload - p.in_taken;
      if (n > size) n = size;
      std::memcpy(data, p.in.data() + p.in_taken, n);
      p.in_taken += n;
      if (p.in_taken == p.in_payload) {
        p.in_checked = false;
        p.header_got = 0;
      }
      return static_cast<ssize_t>(n);
    }
    if (p.header_got < kFrameHeaderBytes) {
      ssize_t n = ::recv(fd_, p.header + p.header_got, kFrameHeaderBytes - p.header_got, MSG_DONTWAIT);
      if (n <= 0) return n;
      p.header_got += static_cast<size_t>(n);
      if (p.header_got < kFrameHeaderBytes) continue;
      uint32_t length = (uint32_t(p.header[0]) << 24) | (uint32_t(p.header[1]) << 16) |
                        (uint32_t(p.header[2]) << 8) | uint32_t(p.header[3]);
      if (length == 0 || length > kMaxFramePayload) {
        // A changed length would only fail the MAC later; refusing it here
        // keeps a forged one from making us buffer up to 4 GiB first.
        p.failure = "data from " + peer_name_ + " failed authentication: frame " +
                        std::to_string(p.receive_sequence) + " announces " + std::to_string(length) +
                        " bytes (1.." + std::to_string(kMaxFramePayload) +
                        " allowed). The connection was tampered with, or the peer does not protect its data "
                        "the same way (HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT).";
        throw_error(ErrorCode::kInternal, p.failure);
      }
      p.in_payload = length;
      p.in.resize(length + kMacBytes);
      p.in_got = 0;
    }
    ssize_t n = ::recv(fd_, p.in.data() + p.in_got, p.in.size() - p.in_got, MSG_DONTWAIT);
    if (n <= 0) return n;
    p.in_got += static_cast<size_t>(n);
    if (p.in_got < p.in.size()) continue;
    Digest256 expected = frame_mac(p.receive_mac, p.receive_sequence, p.header, p.in.data(), p.in_payload);
    volatile uint8_t difference = 0;  // constant time: a mismatch's position stays secret
    for (size_t i = 0; i < kMacBytes; ++i) difference = difference | (expected[i] ^ p.in[p.in_payload + i]);
    if (difference != 0) {
      p.failure = "data from " + peer_name_ + " failed authentication: frame " + std::to_string(p.receive_sequence) +
                      " (" + std::to_string(p.in_payload) +
                      " bytes) does not carry a valid MAC under this link's key. The bytes were changed, "
                      "dropped, replayed or reordered on the way (check the network between the hosts), or "
                      "the peer does not protect its data the same way.";
      throw_error(ErrorCode::kInternal, p.failure);
    }
    if (p.mode == DataProtection::kEncrypt) {
      uint8_t nonce[12];
      nonce_of(p.receive_sequence, nonce);
      chacha20_xor(p.receive_cipher, nonce, 0, p.in.data(), p.in_payload);
    }
    ++p.receive_sequence;
    p.in_checked = true;
    p.in_taken = 0;
  }
}

}  // namespace hvd
