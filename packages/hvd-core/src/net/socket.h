// socket.h - an owned, connected TCP socket with deadline-bounded blocking
// I/O. Every failure (EOF, reset, no progress before the deadline) throws
// Error(kInternal) whose message names the peer (set_peer_name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
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
  // Non-blocking variants: return bytes moved (0 if it would block); throw
  // on EOF or error.
  size_t send_some(const void* data, size_t size);
  size_t recv_some(void* data, size_t size);
  // True when recv would not block (data, EOF or error pending).
  bool readable(double timeout_seconds);

 private:
  int fd_ = -1;
  std::string peer_name_;
};

}  // namespace hvd
