// control_channel.h - framed messages between a process set's coordinator
// and one worker, over an authenticated TCP connection. Reads never block
// (the background thread multiplexes many channels with poll); writes are
// small and bounded by the peer timeout.
#pragma once

#include <chrono>
#include <string>

#include "engine/message.h"
#include "net/socket.h"

namespace hvd {

class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(Socket socket, std::string peer_description, double timeout_seconds);

  int fd() const { return socket_.fd(); }
  bool open() const { return socket_.valid() && !closed_; }
  const std::string& peer() const { return peer_; }

  void send(MessageType type, const std::string& payload);
  // Reads whatever has arrived without blocking. Returns true and fills
  // type/payload when a whole message is available. Throws Error(kInternal)
  // when the peer closed the connection or it broke.
  bool try_receive(MessageType* type, std::string* payload);

  // Time of the last byte received or sent, for heartbeats.
  std::chrono::steady_clock::time_point last_received() const { return last_received_; }
  std::chrono::steady_clock::time_point last_sent() const { return last_sent_; }
  void touch_received() { last_received_ = std::chrono::steady_clock::now(); }
  void close();

 private:
  Socket socket_;
  std::string peer_;
  double timeout_seconds_ = 5.0;
  std::string inbox_;
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_received_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
};

}  // namespace hvd
