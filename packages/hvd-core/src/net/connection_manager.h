// connection_manager.h - one listening TCP socket per process, and
// authenticated point-to-point connections to other ranks on demand.
//
// Both ends of a link call connect(peer, tag) with the same tag: the lower
// global rank waits for the incoming connection, the higher one dials. A
// handshake with fresh nonces on both sides proves to each end that the other
// knows the job secret (HMAC-SHA256); a peer that fails it is rejected,
// logged, and never handed to a caller.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "net/socket.h"

namespace hvd {

class ConnectionManager {
 public:
  // Starts listening on an ephemeral port (all interfaces) and an acceptor
  // thread. `advertise_host` is the address other ranks dial.
  ConnectionManager(int my_rank, std::string secret, std::string advertise_host,
                    double timeout_seconds);
  ~ConnectionManager();  // stops the acceptor, closes unclaimed connections

  // "host:port" that peers should dial; publish it through the store.
  std::string address() const;
  // Where each global rank listens (index = global rank).
  void set_peer_addresses(std::vector<std::string> addresses);

  // An authenticated connection to `peer_rank` for `tag` (e.g. "ps0/ctrl").
  // Throws Error(kInternal) naming the peer and tag on timeout or when the
  // peer fails authentication.
  Socket connect(int peer_rank, const std::string& tag);

  // Number of incoming connections rejected for failed authentication
  // (for tests and logs).
  int rejected_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The local IPv4 address this host uses to reach host:port (via a UDP
// connect + getsockname, so no packet is sent), or the address of interface
// `iface` when given (HOROVOD_GLOO_IFACE).
std::string local_address_towards(const std::string& host, int port, const std::string& iface);

}  // namespace hvd
