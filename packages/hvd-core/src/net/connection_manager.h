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
  // Starts listening on an ephemeral port and an acceptor thread.
  // `advertise_host` is the address other ranks dial (an IPv4 address of
  // this host, from choose_local_endpoint); the listener binds to it alone,
  // so a loopback job is not reachable from other hosts and a job on one
  // NIC is not reachable through the others.
  // `protection`: what every connection's bytes get after the handshake
  // (HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT; every rank must agree), with
  // keys of its own per connection and direction (see derive_link_keys).
  ConnectionManager(int my_rank, std::string secret, std::string advertise_host,
                    double timeout_seconds, DataProtection protection = DataProtection::kNone);
  ~ConnectionManager();  // stops the acceptor, closes unclaimed connections

  // "host:port" that peers should dial; publish it through the store.
  std::string address() const;
  // "ip:port" the listening socket is bound to (what getsockname reports).
  std::string bound_address() const;
  // Where each global rank listens (index = global rank), and optionally
  // where each runs ("host fh2, eth1"), for error messages.
  void set_peer_addresses(std::vector<std::string> addresses, std::vector<std::string> locations = {});
  // A published peer that stays unreachable this long (no route, refused,
  // no answer) is an error at once rather than at the connect timeout: it
  // listened before publishing its address, so it is not merely late.
  void set_unreachable_seconds(double seconds);

  // An authenticated connection to `peer_rank` for `tag` (e.g. "ps0/ctrl").
  // Throws Error(kInternal) naming the peer and tag on timeout or when the
  // peer fails authentication. `interrupt`, when set, is called about every
  // kInterruptSliceSeconds while waiting for the peer; whatever it throws
  // ends the wait.
  Socket connect(int peer_rank, const std::string& tag, const Interrupt& interrupt = {});

  // Number of incoming connections rejected for failed authentication
  // (for tests and logs).
  int rejected_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The keys of one connection, as the dialer (`for_dialer`) or the acceptor
// sees them: a pseudorandom key HMAC(secret, "data keys" | tag | ranks |
// both handshake nonces), expanded by HMAC under it into one MAC key and one
// cipher key per direction. Fresh nonces make every connection's keys new, so
// frames recorded on one connection are worthless on any other.
LinkKeys derive_link_keys(const std::string& secret, const std::string& tag, uint32_t dialer_rank,
                          uint32_t acceptor_rank, const std::string& nonce_dialer,
                          const std::string& nonce_acceptor, bool for_dialer);

struct LocalEndpoint {
  std::string address;  // IPv4, what peers dial
  std::string iface;    // the interface holding it ("" when unknown)
};

// The address other ranks dial. With `ifaces` (HOROVOD_GLOO_IFACE: a comma
// list, since hosts may name their NICs differently) the first listed
// interface that has an IPv4 address on this host; without it the address
// this host routes from towards host:port (a UDP connect + getsockname: no
// packet is sent), so a bridge no other host can reach is never chosen.
LocalEndpoint choose_local_endpoint(const std::string& host, int port, const std::string& ifaces);

}  // namespace hvd
