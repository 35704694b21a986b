// control_channel.cc - frame = u32 length (of type + payload), u8 type, payload.
#include "engine/control_channel.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>

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
  std::string frame;
  uint32_t length = static_cast<uint32_t>(payload.size() + 1);
  frame.reserve(4 + length);
  frame.append(reinterpret_cast<const char*>(&length), 4);
  frame.push_back(static_cast<char>(type));
  frame.append(payload);
  socket_.send_all(frame.data(), frame.size(), timeout_seconds_);
  last_sent_ = std::chrono::steady_clock::now();
}

bool ControlChannel::try_receive(MessageType* type, std::string* payload) {
  auto take_frame = [&]() -> bool {
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
  };
  if (take_frame()) return true;
  if (closed_) return false;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::recv(socket_.fd(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      inbox_.append(buffer, static_cast<size_t>(n));
      last_received_ = std::chrono::steady_clock::now();
      if (static_cast<size_t>(n) < sizeof(buffer)) break;
      continue;
    }
    if (n == 0) {
      closed_ = true;
      if (take_frame()) return true;
      throw_error(ErrorCode::kInternal, peer_ + " closed its connection (the process exited or was killed)");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    closed_ = true;
    throw_error(ErrorCode::kInternal,
                "connection to " + peer_ + " broke: " + std::strerror(errno));
  }
  return take_frame();
}

void ControlChannel::close() {
  closed_ = true;
  socket_.close();
}

}  // namespace hvd
