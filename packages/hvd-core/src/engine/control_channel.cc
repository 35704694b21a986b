// control_channel.cc - frame = u32 length (of type + payload), u8 type, payload.
#include "engine/control_channel.h"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "common/error.h"

namespace hvd {

static constexpr uint32_t kMaxFrame = 1u << 30;

ControlChannel::ControlChannel(Socket socket, std::string peer_description, double timeout_seconds)
    : socket_(std::move(socket)), peer_(std::move(peer_description)), timeout_seconds_(timeout_seconds) {
  socket_.set_peer_name(peer_);
}

void ControlChannel::send(MessageType type, const std::string& payload) {
  if (payload.size() + 1 > kMaxFrame) {
    // The receiver would refuse it (and the length would not fit 32 bits).
    throw_error(ErrorCode::kInternal, "a control message of " + std::to_string(payload.size()) + " bytes for " +
                                          peer_ + " exceeds the 1 GiB frame limit (too many or too long tensor "
                                          "names in flight at once)");
  }
  uint32_t length = static_cast<uint32_t>(payload.size() + 1);
  if (ring_) {
    outbox_.append(reinterpret_cast<const char*>(&length), 4);
    outbox_.push_back(static_cast<char>(type));
    outbox_.append(payload);
    flush_ring();
  } else {
    std::string frame;
    frame.reserve(4 + length);
    frame.append(reinterpret_cast<const char*>(&length), 4);
    frame.push_back(static_cast<char>(type));
    frame.append(payload);
    socket_.send_all(frame.data(), frame.size(), timeout_seconds_);
  }
  last_sent_ = std::chrono::steady_clock::now();
}

void ControlChannel::flush_ring() {
  if (outbox_.empty() || closed_) return;
  size_t n = ring_->write(outbox_.data(), outbox_.size());
  outbox_.erase(0, n);
  if (n && ring_->reader_needs_doorbell()) {
    // One byte wakes the peer's poll(); a full socket buffer means bytes are
    // already waiting there, which wakes it just as well.
    char bell = 0;
    ssize_t ignored = ::send(socket_.fd(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
  }
}

bool ControlChannel::take_frame(MessageType* type, std::string* payload) {
  if (inbox_.size() < 4) return false;
  uint32_t length;
  std::memcpy(&length, inbox_.data(), 4);
  if (length == 0 || length > kMaxFrame) {
    throw_error(ErrorCode::kInternal, "corrupt control message from " + peer_);
  }
  if (inbox_.size() < 4 + static_cast<size_t>(length)) return false;
  *type = static_cast<MessageType>(inbox_[4]);
  payload->assign(inbox_, 5, length - 1);
  inbox_.erase(0, 4 + static_cast<size_t>(length));
  return true;
}

void ControlChannel::read_socket() {
  char buffer[256];
  for (;;) {
    ssize_t n = ::recv(socket_.fd(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) continue;  // doorbells
    if (n == 0) {
      peer_closed_ = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    closed_ = true;
    throw_error(ErrorCode::kInternal, "connection to " + peer_ + " broke: " + std::strerror(errno));
  }
}

bool ControlChannel::try_receive(MessageType* type, std::string* payload) {
  if (take_frame(type, payload)) return true;
  if (closed_) return false;
  if (ring_) {
    flush_ring();
    if (ring_->read_into(&inbox_)) last_received_ = std::chrono::steady_clock::now();
    if (take_frame(type, payload)) return true;
    // The socket only carries the peer's death (and doorbells): looking at
    // it once a millisecond keeps the system call off the fast path.
    auto now = std::chrono::steady_clock::now();
    if (check_socket_ || now >= next_socket_check_) {
      check_socket_ = false;
      next_socket_check_ = now + std::chrono::milliseconds(1);
      read_socket();
    }
    if (!peer_closed_) return false;
    // What the peer wrote before it closed is in the ring: read it first.
    ring_->read_into(&inbox_);
    if (take_frame(type, payload)) return true;
    closed_ = true;
    throw_error(ErrorCode::kInternal, peer_ + " closed its connection (the process exited or was killed)");
  }
  char buffer[65536];
  // A protected socket returns one frame's bytes per read: read until it
  // would block, so no checked bytes wait inside it while poll() sleeps.
  const bool framed = socket_.protection() != DataProtection::kNone;
  for (;;) {
    ssize_t n = socket_.read_some(buffer, sizeof(buffer));
    if (n > 0) {
      inbox_.append(buffer, static_cast<size_t>(n));
      last_received_ = std::chrono::steady_clock::now();
      if (!framed && static_cast<size_t>(n) < sizeof(buffer)) break;
      continue;
    }
    if (n == 0) {
      closed_ = true;
      if (take_frame(type, payload)) return true;
      throw_error(ErrorCode::kInternal, peer_ + " closed its connection (the process exited or was killed)");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    closed_ = true;
    throw_error(ErrorCode::kInternal,
                "connection to " + peer_ + " broke: " + std::strerror(errno));
  }
  return take_frame(type, payload);
}

void ControlChannel::receive(MessageType* type, std::string* payload, double timeout_seconds,
                             const Interrupt& interrupt) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                std::chrono::duration<double>(timeout_seconds));
  while (!try_receive(type, payload)) {
    if (interrupt) interrupt();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || closed_) {
      throw_error(ErrorCode::kInternal, peer_ + " sent nothing for " + std::to_string(timeout_seconds) +
                                            " s while the process set started");
    }
    pollfd p{socket_.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)) + 1);
  }
}

void ControlChannel::use_ring(std::unique_ptr<ShmRing> ring) {
  ring_ = std::move(ring);
  next_socket_check_ = std::chrono::steady_clock::now();
}

bool ControlChannel::prepare_to_sleep() {
  if (!ring_ || closed_) return true;
  return ring_->prepare_to_sleep();
}

void ControlChannel::awake() {
  if (!ring_) return;
  ring_->awake();
  check_socket_ = true;
}

void ControlChannel::close() {
  if (ring_ && !closed_) flush_ring();  // a last kAbort or kGoodbye, when it fits
  closed_ = true;
  socket_.close();
}

}  // namespace hvd
