// socket.cc - deadline-bounded blocking and non-blocking I/O on an owned TCP
// socket. All I/O uses MSG_DONTWAIT + poll, so the same socket serves both
// the blocking helpers and the poll-driven collective loops.
#include "net/socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"

namespace hvd {
namespace {

[[noreturn]] void throw_io(const std::string& what, const std::string& peer, int err) {
  throw_error(ErrorCode::kInternal, what + " " + (peer.empty() ? "<unnamed peer>" : peer) +
                                        " failed: " + (err ? std::strerror(err) : "connection closed by peer"));
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

}  // namespace

Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_name_(std::move(other.peer_name_)) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_name_ = std::move(other.peer_name_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

size_t Socket::send_some(const void* data, size_t size) {
  if (size == 0) return 0;
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
    ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
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

bool Socket::readable(double timeout_seconds) { return wait_for(fd_, POLLIN, timeout_seconds); }

}  // namespace hvd
