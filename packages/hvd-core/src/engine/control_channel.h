// control_channel.h - framed messages between a process set's coordinator
// and one worker, over an authenticated TCP connection, or, when both are on
// one host, over a shared-memory ring beside it (the connection then only
// reports the peer's death and wakes a sleeping reader). Reads never block
// (the background thread multiplexes many channels with poll); writes are
// small and bounded by the peer timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/interrupt.h"
#include "engine/message.h"
#include "net/socket.h"
#include "transport/shm/shm_ring.h"

namespace hvd {

class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(Socket socket, std::string peer_description, double timeout_seconds);

  int fd() const { return socket_.fd(); }
  bool open() const { return socket_.valid() && !closed_; }
  const std::string& peer() const { return peer_; }

  void send(MessageType type, const std::string& payload);
  // Blocks until a whole message arrives (start-up only); throws
  // Error(kInternal) after `timeout_seconds`. `interrupt`, when set, is
  // called about every kInterruptSliceSeconds meanwhile; what it throws ends
  // the wait.
  void receive(MessageType* type, std::string* payload, double timeout_seconds, const Interrupt& interrupt = {});
  // Reads whatever has arrived without blocking. Returns true and fills
  // type/payload when a whole message is available. Throws Error(kInternal)
  // when the peer closed the connection or it broke.
  bool try_receive(MessageType* type, std::string* payload);

  // Time of the last byte received or sent, for heartbeats.
  std::chrono::steady_clock::time_point last_received() const { return last_received_; }
  std::chrono::steady_clock::time_point last_sent() const { return last_sent_; }
  void touch_received() { last_received_ = std::chrono::steady_clock::now(); }
  void close();

  // Carries every later message over `ring` (both sides switch at the same
  // point of the message stream: after the ring handshake).
  void use_ring(std::unique_ptr<ShmRing> ring);
  bool uses_ring() const { return ring_ != nullptr; }
  // Before the caller sleeps in poll() on fd(): false when a message may be
  // waiting already (do not sleep). awake() after the sleep.
  bool prepare_to_sleep();
  void awake();
  // Bytes a full ring could not take yet (sent by later calls).
  bool has_unsent() const { return !outbox_.empty(); }

 private:
  void flush_ring();
  void read_socket();  // ring mode: doorbells and end of file
  bool take_frame(MessageType* type, std::string* payload);

  Socket socket_;
  std::unique_ptr<ShmRing> ring_;
  std::string outbox_;
  bool peer_closed_ = false;
  bool check_socket_ = false;
  std::chrono::steady_clock::time_point next_socket_check_;
  std::string peer_;
  double timeout_seconds_ = 5.0;
  std::string inbox_;
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_received_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
};

}  // namespace hvd
