// connection_manager.cc - the listening socket, the acceptor thread that runs
// every incoming handshake as a non-blocking state machine (so a silent or
// garbage-sending client cannot stall anyone else), the dialing side with
// retries, and the pool of authenticated connections not yet claimed.
//
// Handshake (dialer = higher global rank, acceptor = lower):
//   dialer   -> "HVD1" | dialer_rank u32 | acceptor_rank u32 | tag_len u16 | nonce_d[16] | tag
//   acceptor -> nonce_a[16] | HMAC(secret, "acceptor" | tag | acceptor_rank | dialer_rank | nonce_d | nonce_a)
//   dialer   -> HMAC(secret, "dialer" | tag | dialer_rank | acceptor_rank | nonce_d | nonce_a)
//   acceptor -> 'K'
// The role string keeps one side's proof from being reflected as the
// other's; fresh nonces on both sides keep recorded proofs from replaying.
// With data protection on, both sides derive the link's keys from the same
// inputs (derive_link_keys) and frame every later byte (net/socket.h).
#include "net/connection_manager.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "auth/hmac_sha256.h"
#include "common/deadline.h"
#include "common/error.h"
#include "common/logging.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[4] = {'H', 'V', 'D', '1'};
constexpr size_t kNonceBytes = 16;
constexpr size_t kHelloHeaderBytes = 4 + 4 + 4 + 2 + kNonceBytes;
constexpr size_t kProofBytes = 32;
constexpr size_t kMaxTagBytes = 1024;
// Handshakes in progress, in all and per source address. A source over its
// share loses its oldest handshake, so one client that opens connections and
// never speaks cannot fill the table that real peers need; the global bound
// keeps file descriptors in check (many processes run with 1024). The share
// is generous because all ranks of a host dial from one address, and at
// start-up rank 0 hears from every one of them at once.
constexpr size_t kMaxPendingHandshakes = 256;
constexpr size_t kMaxPendingPerSource = 128;
// A real dialer sends its hello at once and answers within a round trip, so
// a connection still unfinished after this long is not a peer worth waiting for.
constexpr double kMaxHandshakeSeconds = 5.0;
// Handshakes the dialer tries on fresh connections when the acceptor closes
// or resets one (it may have shed it while flooded), within the connect timeout.
constexpr int kDialerHandshakeAttempts = 4;
// Peer-supplied bytes shown in a log line or error, at most.
constexpr size_t kMaxLoggedBytes = 64;

std::string format_seconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", seconds);
  return buf;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (24 - 8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string proof_message(const char* role, const std::string& tag, uint32_t my_rank,
                          uint32_t peer_rank, const std::string& nonce_dialer,
                          const std::string& nonce_acceptor) {
  std::string msg(role);
  msg.push_back('|');
  msg += tag;
  msg.push_back('|');
  put_u32(msg, my_rank);
  put_u32(msg, peer_rank);
  msg += nonce_dialer;
  msg += nonce_acceptor;
  return msg;
}

std::string make_proof(const std::string& secret, const std::string& message) {
  Digest256 d = hmac_sha256(secret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string random_bytes(size_t n) {
  std::string hex = random_hex(n);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

void tune_socket(int fd) {
  int one = 1;
  // Collectives exchange many small messages; Nagle would add 40 ms stalls.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Buffer sizes are left to the kernel's autotuning: a fixed SO_RCVBUF is
  // capped by net.core.rmem_max (often 208 KiB), far below what autotuning reaches.
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Peer-supplied bytes made safe to log: printable ASCII as is, everything
// else (control characters, terminal escapes, newlines that would forge log
// lines) as \xNN, and at most kMaxLoggedBytes of input.
std::string printable(const std::string& bytes) {
  std::string out;
  size_t shown = std::min(bytes.size(), kMaxLoggedBytes);
  for (size_t i = 0; i < shown; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (shown < bytes.size()) out += "... (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

// The host part of an address, without the port: handshakes are budgeted per source host.
std::string source_of(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
  }
  return host;
}

std::string describe_sockaddr(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void split_host_port(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw_error(ErrorCode::kInvalidArgument, "peer address '" + address + "' is not host:port");
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = address.substr(colon + 1);
}

// One incoming connection whose handshake is in progress.
struct PendingHandshake {
  enum class Stage { kHello, kTag, kProof, kAck };
  Socket socket;
  std::string remote;   // "ip:port"
  std::string source;   // "ip", the key of the per-source budget
  Clock::time_point deadline;
  Stage stage = Stage::kHello;
  std::string in;       // bytes received for the current stage
  size_t need = kHelloHeaderBytes;
  std::string out;      // bytes still to send
  uint32_t dialer_rank = 0;
  std::string tag;
  std::string nonce_dialer;
  std::string nonce_acceptor;
};

// `host` as an IPv4 address: a literal, or the first IPv4 address it resolves to.
bool ipv4_of(const std::string& host, in_addr* out) {
  if (inet_pton(AF_INET, host.c_str(), out) == 1) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0 || result == nullptr) return false;
  *out = reinterpret_cast<const sockaddr_in*>(result->ai_addr)->sin_addr;
  freeaddrinfo(result);
  return true;
}

// A handshake that failed on the connection itself (reset, closed, stalled)
// rather than on authentication.
struct HandshakeIoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

LinkKeys derive_link_keys(const std::string& secret, const std::string& tag, uint32_t dialer_rank,
                          uint32_t acceptor_rank, const std::string& nonce_dialer,
                          const std::string& nonce_acceptor, bool for_dialer) {
  const std::string link_key =
      make_proof(secret, proof_message("data keys", tag, dialer_rank, acceptor_rank, nonce_dialer, nonce_acceptor));
  auto expand = [&](const char* label) { return make_proof(link_key, label); };
  std::string mac_out = expand("mac dialer to acceptor"), mac_in = expand("mac acceptor to dialer");
  std::string cipher_out = expand("cipher dialer to acceptor"), cipher_in = expand("cipher acceptor to dialer");
  if (!for_dialer) {
    std::swap(mac_out, mac_in);
    std::swap(cipher_out, cipher_in);
  }
  return LinkKeys{mac_out, mac_in, cipher_out, cipher_in};
}

struct ConnectionManager::Impl {
  int my_rank;
  std::string secret;
  DataProtection protection = DataProtection::kNone;
  std::string advertise_host;
  double timeout_seconds;
  int listen_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::thread acceptor;
  std::atomic<bool> stopping{false};
  std::atomic<int> rejected{0};

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> peer_addresses;
  std::vector<std::string> peer_locations;
  double unreachable_seconds = 0;  // 0: only the connect timeout
  std::map<std::pair<int, std::string>, std::deque<Socket>> unclaimed;

  double handshake_timeout() const { return std::max(1.0, std::min(timeout_seconds, kMaxHandshakeSeconds)); }

  // `reason` must hold no unsanitised peer bytes (see printable()).
  void reject(PendingHandshake& p, const std::string& reason, bool warn = true) {
    rejected.fetch_add(1);
    if (warn) {
      HVD_LOG(kWarning, "rejected connection from " << p.remote << ": " << reason);
    } else {
      HVD_LOG(kDebug, "rejected connection from " << p.remote << ": " << reason);
    }
    p.socket.close();
  }

  // Makes room for one more handshake from `source`: drops that source's
  // oldest when it has its share, else, when the table is full, the oldest
  // of the source holding the most. `pending` is in arrival order. A flood
  // from one source is logged once per flood, not once per connection.
  void shed_for(const std::string& source, std::vector<std::unique_ptr<PendingHandshake>>& pending,
                std::map<std::string, size_t>& per_source) {
    std::string victim;
    if (per_source[source] >= kMaxPendingPerSource) {
      victim = source;
    } else if (pending.size() >= kMaxPendingHandshakes) {
      size_t most = 0;
      for (const auto& e : per_source) {
        if (e.second > most) {
          most = e.second;
          victim = e.first;
        }
      }
    } else {
      return;
    }
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if ((*it)->source != victim) continue;
      bool first = shedding.insert(victim).second;
      if (first) {
        HVD_LOG(kWarning, "too many unfinished handshakes from " << victim << " (at most " << kMaxPendingPerSource
                                                                 << " per source, " << kMaxPendingHandshakes
                                                                 << " in all): closing its oldest ones");
      }
      reject(**it, "too many handshakes in progress from " + victim, false);
      if (--per_source[victim] == 0) per_source.erase(victim);
      pending.erase(it);
      return;
    }
  }
  std::set<std::string> shedding;  // sources whose flood has been logged; acceptor thread only

  // Advances one handshake with whatever bytes are available. Returns true
  // when the handshake is finished (successfully or not).
  bool advance(PendingHandshake& p) {
    try {
      if (!p.out.empty()) {
        size_t n = p.socket.send_some(p.out.data(), p.out.size());
        p.out.erase(0, n);
        if (!p.out.empty()) return false;
        if (p.stage == PendingHandshake::Stage::kAck) {
          std::lock_guard<std::mutex> lock(mu);
          p.socket.set_peer_name("rank " + std::to_string(p.dialer_rank) + " (" + p.remote + ")");
          if (protection != DataProtection::kNone) {
            p.socket.protect(protection, derive_link_keys(secret, p.tag, p.dialer_rank, my_rank, p.nonce_dialer,
                                                          p.nonce_acceptor, false));
          }
          unclaimed[{static_cast<int>(p.dialer_rank), p.tag}].push_back(std::move(p.socket));
          cv.notify_all();
          return true;
        }
      }
      for (;;) {
        char buf[256];
        size_t want = std::min(sizeof(buf), p.need - p.in.size());
        size_t n = p.socket.recv_some(buf, want);
        if (n == 0) return false;
        p.in.append(buf, n);
        if (p.in.size() < p.need) continue;
        const uint8_t* bytes = reinterpret_cast<const uint8_t*>(p.in.data());
        switch (p.stage) {
          case PendingHandshake::Stage::kHello: {
            if (std::memcmp(bytes, kMagic, 4) != 0) {
              reject(p, "not an hvd handshake (bad magic)");
              return true;
            }
            p.dialer_rank = get_u32(bytes + 4);
            uint32_t target = get_u32(bytes + 8);
            size_t tag_len = (size_t(bytes[12]) << 8) | bytes[13];
            p.nonce_dialer.assign(p.in.data() + 14, kNonceBytes);
            if (target != static_cast<uint32_t>(my_rank)) {
              reject(p, "addressed to rank " + std::to_string(target) + ", this is rank " +
                            std::to_string(my_rank));
              return true;
            }
            // Only a higher rank dials (connect()), and connect() can claim
            // only ranks that fit an int: a connection from any other rank
            // would wait unclaimed, holding its descriptor, until shutdown.
            if (p.dialer_rank <= static_cast<uint32_t>(my_rank) ||
                p.dialer_rank > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
              reject(p, "claims to be rank " + std::to_string(p.dialer_rank) + ", but only ranks above " +
                            std::to_string(my_rank) + " dial rank " + std::to_string(my_rank));
              return true;
            }
            if (tag_len == 0 || tag_len > kMaxTagBytes) {
              reject(p, "invalid tag length " + std::to_string(tag_len));
              return true;
            }
            p.stage = PendingHandshake::Stage::kTag;
            p.need = tag_len;
            p.in.clear();
            break;
          }
          case PendingHandshake::Stage::kTag: {
            p.tag = p.in;
            p.nonce_acceptor = random_bytes(kNonceBytes);
            p.out = p.nonce_acceptor +
                    make_proof(secret, proof_message("acceptor", p.tag, my_rank, p.dialer_rank,
                                                     p.nonce_dialer, p.nonce_acceptor));
            p.stage = PendingHandshake::Stage::kProof;
            p.need = kProofBytes;
            p.in.clear();
            size_t sent = p.socket.send_some(p.out.data(), p.out.size());
            p.out.erase(0, sent);
            break;
          }
          case PendingHandshake::Stage::kProof: {
            std::string expected = make_proof(secret, proof_message("dialer", p.tag, p.dialer_rank, my_rank,
                                                                    p.nonce_dialer, p.nonce_acceptor));
            if (!constant_time_equal(expected, p.in)) {
              reject(p, "authentication failed (claimed rank " + std::to_string(p.dialer_rank) +
                            ", tag '" + printable(p.tag) + "'): wrong job secret?");
              return true;
            }
            p.stage = PendingHandshake::Stage::kAck;
            p.out = "K";
            p.in.clear();
            return advance(p);
          }
          case PendingHandshake::Stage::kAck:
            // The dialer sends nothing after its proof; extra bytes are data
            // that belongs to the connection, which we must not consume.
            return false;
        }
      }
    } catch (const Error& e) {
      reject(p, std::string("handshake aborted: ") + e.what());
      return true;
    }
  }

  void run_acceptor() {
    std::vector<std::unique_ptr<PendingHandshake>> pending;
    std::map<std::string, size_t> per_source;  // entries of `pending` per source
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      fds.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      double wait = 0.1;
      for (auto& p : pending) {
        short events = p->out.empty() ? POLLIN : POLLOUT;
        fds.push_back({p->socket.fd(), events, 0});
        wait = std::min(wait, std::max(0.0, seconds_until(p->deadline)));
      }
      int rc = ::poll(fds.data(), fds.size(), static_cast<int>(wait * 1000.0) + 1);
      if (rc < 0 && errno != EINTR) break;
      if (stopping.load()) break;
      // Handshakes first: index i in `pending` is fds[i + 2].
      std::vector<std::unique_ptr<PendingHandshake>> still_pending;
      for (size_t i = 0; i < pending.size(); ++i) {
        auto& p = pending[i];
        bool done = false;
        if (rc > 0 && fds[i + 2].revents != 0) done = advance(*p);
        if (!done && Clock::now() > p->deadline) {
          reject(*p, "no complete handshake within " + std::to_string(handshake_timeout()) + " s");
          done = true;
        }
        if (!done) {
          still_pending.push_back(std::move(p));
        } else if (--per_source[p->source] == 0) {
          per_source.erase(p->source);
        }
      }
      pending.swap(still_pending);
      if (pending.empty()) shedding.clear();
      if (rc > 0 && (fds[1].revents & POLLIN)) {
        for (;;) {
          sockaddr_storage addr;
          socklen_t len = sizeof(addr);
          int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
          if (fd < 0) break;
          tune_socket(fd);
          auto p = std::make_unique<PendingHandshake>();
          p->socket = Socket(fd);
          p->remote = describe_sockaddr(addr);
          p->source = source_of(addr);
          p->socket.set_peer_name(p->remote);
          p->deadline = deadline_after(handshake_timeout());
          // The newest connection stays: a real peer that arrives during a
          // flood is the newest of its source and finishes within a round trip.
          shed_for(p->source, pending, per_source);
          ++per_source[p->source];
          pending.push_back(std::move(p));
        }
      }
    }
  }

  // "rank 3 (host fh2, eth1)", or "rank 3" when the engine gave no locations.
  std::string describe(int rank) {
    std::string out = "rank " + std::to_string(rank);
    if (rank >= 0 && static_cast<size_t>(rank) < peer_locations.size() && !peer_locations[rank].empty()) {
      out += " (" + peer_locations[rank] + ")";
    }
    return out;
  }

  Socket dial(int peer_rank, const std::string& tag, Clock::time_point deadline, const Interrupt& interrupt) {
    std::string address, me, peer;
    double give_up_after;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (peer_rank < 0 || static_cast<size_t>(peer_rank) >= peer_addresses.size() ||
          peer_addresses[peer_rank].empty()) {
        throw_error(ErrorCode::kInternal, "connect to rank " + std::to_string(peer_rank) +
                                              " (tag '" + tag + "'): its address is unknown");
      }
      address = peer_addresses[peer_rank];
      me = describe(my_rank);
      peer = describe(peer_rank);
      give_up_after = unreachable_seconds;
    }
    std::string host, port;
    split_host_port(address, &host, &port);
    std::string last_error = "timed out";
    double backoff = 0.005;
    Clock::time_point failing_since{};
    // One attempt waits at most this long for an answer, so a peer that
    // drops every packet counts as failing too.
    const double attempt_seconds = give_up_after > 0 ? std::max(0.5, give_up_after / 4) : 1e9;
    while (Clock::now() < deadline) {
      if (interrupt) interrupt();
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* result = nullptr;
      int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
      if (gai != 0) {
        last_error = std::string("cannot resolve: ") + gai_strerror(gai);
      } else {
        for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
          int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
          if (fd < 0) continue;
          tune_socket(fd);
          int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
          if (rc < 0 && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            int wait_ms = static_cast<int>(std::max(0.0, std::min(seconds_until(deadline), attempt_seconds)) * 1000) + 1;
            if (::poll(&p, 1, wait_ms) == 1) {
              int err = 0;
              socklen_t len = sizeof(err);
              getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
              rc = err == 0 ? 0 : -1;
              errno = err;
            } else {
              errno = ETIMEDOUT;
            }
          }
          if (rc == 0) {
            freeaddrinfo(result);
            Socket s(fd);
            s.set_peer_name(peer + " at " + address);
            return s;
          }
          last_error = std::strerror(errno);
          ::close(fd);
        }
        freeaddrinfo(result);
      }
      Clock::time_point now = Clock::now();
      if (failing_since == Clock::time_point{}) failing_since = now;
      if (give_up_after > 0 && std::chrono::duration<double>(now - failing_since).count() >= give_up_after) {
        throw_error(ErrorCode::kInternal, me + " cannot reach " + peer + " at " + address + " (tag '" + tag +
                                              "'): " + last_error + " for " + format_seconds(give_up_after) +
                                              ". Check that the hosts can reach each other on the chosen "
                                              "interfaces (HOROVOD_GLOO_IFACE / --network-interfaces).");
      }
      // A connection can fail while the network settles: retry with a short backoff.
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, 0.1);
    }
    throw_error(ErrorCode::kInternal, me + " could not connect to " + peer + " at " + address + " (tag '" +
                                          tag + "'): " + last_error);
  }

  // The dialer's side of the handshake on a fresh connection `s`. Throws
  // HandshakeIoError when the connection fails under it (worth a new
  // connection), Error when the peer fails authentication (not).
  Socket dialer_handshake(Socket s, int peer_rank, const std::string& tag, Clock::time_point deadline,
                          const Interrupt& interrupt) {
    double step_timeout = std::max(0.1, seconds_until(deadline));
    std::string nonce_dialer = random_bytes(kNonceBytes);
    std::string hello(kMagic, 4);
    put_u32(hello, static_cast<uint32_t>(my_rank));
    put_u32(hello, static_cast<uint32_t>(peer_rank));
    hello.push_back(static_cast<char>(tag.size() >> 8));
    hello.push_back(static_cast<char>(tag.size() & 0xff));
    hello += nonce_dialer;
    hello += tag;
    std::string reply(kNonceBytes + kProofBytes, '\0');
    try {
      s.send_all(hello.data(), hello.size(), step_timeout);
      s.recv_all(&reply[0], reply.size(), step_timeout, interrupt);
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      throw HandshakeIoError("connect to " + s.peer_name() + " (tag '" + tag + "'): " + e.what());
    }
    std::string nonce_acceptor = reply.substr(0, kNonceBytes);
    std::string expected = make_proof(secret, proof_message("acceptor", tag, peer_rank, my_rank,
                                                            nonce_dialer, nonce_acceptor));
    if (!constant_time_equal(expected, reply.substr(kNonceBytes))) {
      rejected.fetch_add(1);
      HVD_LOG(kWarning, "rejected connection to " << s.peer_name() << " (tag '" << tag
                                                  << "'): it failed authentication (wrong job secret?)");
      throw_error(ErrorCode::kInternal, "connect to " + s.peer_name() + " (tag '" + tag +
                                            "'): the peer failed authentication");
    }
    std::string proof = make_proof(secret, proof_message("dialer", tag, my_rank, peer_rank,
                                                         nonce_dialer, nonce_acceptor));
    char ack = 0;
    try {
      s.send_all(proof.data(), proof.size(), step_timeout);
      s.recv_all(&ack, 1, step_timeout, interrupt);
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      // The acceptor checked our proof only if its own was right, so with
      // the same secret this is a dropped connection, not a rejection.
      throw HandshakeIoError("connect to " + s.peer_name() + " (tag '" + tag +
                             "'): the peer closed the connection before accepting our authentication (" +
                             e.what() + ")");
    }
    if (protection != DataProtection::kNone) {
      s.protect(protection, derive_link_keys(secret, tag, my_rank, peer_rank, nonce_dialer, nonce_acceptor, true));
    }
    return s;
  }
};

ConnectionManager::ConnectionManager(int my_rank, std::string secret, std::string advertise_host,
                                     double timeout_seconds, DataProtection protection)
    : impl_(std::make_unique<Impl>()) {
  impl_->my_rank = my_rank;
  impl_->protection = protection;
  impl_->secret = std::move(secret);
  impl_->advertise_host = std::move(advertise_host);
  impl_->timeout_seconds = timeout_seconds;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_error(ErrorCode::kInternal, std::string("socket() failed: ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  // Only the address peers are told to dial: binding every interface would
  // expose a loopback job to the network and a job on one NIC to all others.
  if (!ipv4_of(impl_->advertise_host, &addr.sin_addr)) {
    ::close(fd);
    throw_error(ErrorCode::kInternal, "cannot listen for peer connections on '" + impl_->advertise_host +
                                          "': not an IPv4 address of this host");
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 512) != 0) {
    int err = errno;
    ::close(fd);
    throw_error(ErrorCode::kInternal, "cannot listen for peer connections on " + impl_->advertise_host + ": " +
                                          std::strerror(err));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl_->port = ntohs(addr.sin_port);
  impl_->listen_fd = fd;
  impl_->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Impl* impl = impl_.get();
  impl_->acceptor = std::thread([impl] { impl->run_acceptor(); });
}

ConnectionManager::~ConnectionManager() {
  impl_->stopping.store(true);
  uint64_t one = 1;
  ssize_t ignored = ::write(impl_->wake_fd, &one, sizeof(one));
  (void)ignored;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  ::close(impl_->listen_fd);
  ::close(impl_->wake_fd);
}

std::string ConnectionManager::address() const {
  const std::string& host = impl_->advertise_host;
  bool ipv6_literal = host.find(':') != std::string::npos;
  return (ipv6_literal ? "[" + host + "]" : host) + ":" + std::to_string(impl_->port);
}

std::string ConnectionManager::bound_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return describe_sockaddr(addr);
}

void ConnectionManager::set_unreachable_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->unreachable_seconds = seconds;
}

void ConnectionManager::set_peer_addresses(std::vector<std::string> addresses, std::vector<std::string> locations) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->peer_locations = std::move(locations);
  impl_->peer_addresses = std::move(addresses);
}

int ConnectionManager::rejected_connections() const { return impl_->rejected.load(); }

Socket ConnectionManager::connect(int peer_rank, const std::string& tag, const Interrupt& interrupt) {
  if (peer_rank == impl_->my_rank) {
    throw_error(ErrorCode::kInvalidArgument, "connect: rank " + std::to_string(peer_rank) +
                                                 " cannot connect to itself (tag '" + tag + "')");
  }
  if (tag.empty() || tag.size() > kMaxTagBytes) {
    throw_error(ErrorCode::kInvalidArgument, "connect: tag must be 1.." + std::to_string(kMaxTagBytes) + " bytes");
  }
  Clock::time_point deadline = deadline_after(impl_->timeout_seconds);
  if (impl_->my_rank < peer_rank) {
    // The higher rank dials; wait for its authenticated connection.
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto key = std::make_pair(peer_rank, tag);
    auto arrived = [&] {
      auto it = impl_->unclaimed.find(key);
      return it != impl_->unclaimed.end() && !it->second.empty();
    };
    bool ok = false;
    while (!ok && Clock::now() < deadline) {
      if (interrupt) {
        lock.unlock();
        interrupt();
        lock.lock();
      }
      const Clock::time_point until = interrupt ? std::min(deadline, deadline_after(kInterruptSliceSeconds)) : deadline;
      ok = impl_->cv.wait_until(lock, until, arrived);
    }
    if (!ok) {
      throw_error(ErrorCode::kInternal, impl_->describe(peer_rank) + " did not connect to " +
                                            impl_->describe(impl_->my_rank) + " (tag '" + tag + "') within " +
                                            format_seconds(impl_->timeout_seconds));
    }
    auto it = impl_->unclaimed.find(key);
    Socket s = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) impl_->unclaimed.erase(it);
    s.set_peer_name(impl_->describe(peer_rank) + " at " + s.peer_name());
    return s;
  }

  // The acceptor may close a connection before answering (it sheds the
  // oldest handshakes of a flooded source, or was not listening yet behind a
  // reused port): a reset or closed handshake is tried again on a fresh
  // connection, a few times, within the same deadline. A wrong proof is not.
  for (int attempt = 1;; ++attempt) {
    Socket s = impl_->dial(peer_rank, tag, deadline, interrupt);
    try {
      return impl_->dialer_handshake(std::move(s), peer_rank, tag, deadline, interrupt);
    } catch (const HandshakeIoError& e) {
      if (attempt >= kDialerHandshakeAttempts || seconds_until(deadline) <= 0) {
        throw_error(ErrorCode::kInternal, e.what());
      }
      HVD_LOG(kDebug, "handshake attempt " << attempt << " failed, retrying: " << e.what());
    }
  }
}

namespace {

// IPv4 address of each interface that has one, in the kernel's order.
std::vector<std::pair<std::string, std::string>> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw_error(ErrorCode::kInternal, std::string("getifaddrs failed: ") + std::strerror(errno));
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof(buf));
      out.emplace_back(it->ifa_name, buf);
    }
  }
  freeifaddrs(list);
  return out;
}

std::string route_source_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  std::string port_str = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_str.c_str(), &hints, &result) != 0 || result == nullptr) {
    throw_error(ErrorCode::kInternal, "cannot resolve '" + host + "' to find the local address towards it");
  }
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
      out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(result);
  if (out.empty()) {
    throw_error(ErrorCode::kInternal, "no route from this host to '" + host + "'");
  }
  return out;
}

}  // namespace

LocalEndpoint choose_local_endpoint(const std::string& host, int port, const std::string& ifaces) {
  const auto have = ipv4_interfaces();
  if (!ifaces.empty()) {
    std::vector<std::string> wanted;
    std::string name;
    for (char c : ifaces + ",") {
      if (c != ',') {
        if (c != ' ') name += c;
      } else if (!name.empty()) {
        wanted.push_back(name);
        name.clear();
      }
    }
    for (const auto& w : wanted) {
      for (const auto& h : have) {
        if (h.first == w) return {h.second, h.first};
      }
    }
    std::string listed;
    for (const auto& h : have) listed += (listed.empty() ? "" : ", ") + h.first;
    char hostname[256] = {0};
    gethostname(hostname, sizeof(hostname) - 1);
    throw_error(ErrorCode::kInvalidArgument, "none of the network interfaces '" + ifaces +
                                                 "' (HOROVOD_GLOO_IFACE, --network-interfaces) has an IPv4 "
                                                 "address on host " + hostname + " (interfaces with one: " +
                                                 listed + ")");
  }
  LocalEndpoint out{route_source_address(host, port), ""};
  for (const auto& h : have) {
    if (h.second == out.address) {
      out.iface = h.first;
      break;
    }
  }
  return out;
}

}  // namespace hvd
