// connection_manager_test.cc - authenticated connections: good peers
// connect in either order, wrong secrets and garbage are rejected and
// counted, and a silent or garbage client never stalls a good one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "auth/hmac_sha256.h"
#include "common/error.h"
#include "common/interrupt.h"
#include "net/connection_manager.h"
#include "test_harness.h"

using namespace hvd;

namespace {

int port_of(const ConnectionManager& cm) {
  std::string a = cm.address();
  return std::stoi(a.substr(a.rfind(':') + 1));
}

int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::hvd_test::fail(__FILE__, __LINE__, "raw connect failed");
  }
  return fd;
}

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (24 - 8 * i)));
}

// Reads exactly n bytes (or fewer when the connection ends first).
std::string read_n(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, &out[got], n - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

std::string hello_for(uint32_t dialer, uint32_t acceptor, const std::string& nonce, const std::string& tag) {
  std::string hello("HVD1", 4);
  put_u32(hello, dialer);
  put_u32(hello, acceptor);
  hello.push_back(static_cast<char>(tag.size() >> 8));
  hello.push_back(static_cast<char>(tag.size() & 0xff));
  return hello + nonce + tag;
}

bool wait_until(const std::function<bool()>& cond, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace

// Ranks 0 and 1 connect to each other under `tag` at the same time, as a
// job's ranks do; returns how long it took.
double seconds_to_connect(ConnectionManager& cm0, ConnectionManager& cm1, const std::string& tag, Socket* s0,
                          Socket* s1) {
  auto start = std::chrono::steady_clock::now();
  ::hvd_test::run_members(2, [&](int m) {
    if (m == 0) *s0 = cm0.connect(1, tag); else *s1 = cm1.connect(0, tag);
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

HVD_TEST(connect_pairs_ranks_and_carries_data_both_ways) {
  ConnectionManager cm0(0, "secret", "127.0.0.1", 5.0), cm1(1, "secret", "127.0.0.1", 5.0);
  std::vector<std::string> addresses{cm0.address(), cm1.address()};
  cm0.set_peer_addresses(addresses);
  cm1.set_peer_addresses(addresses);
  Socket s0, s1, t0, t1;
  ::hvd_test::run_members(2, [&](int m) {
    if (m == 0) {
      s0 = cm0.connect(1, "job/a");
      t0 = cm0.connect(1, "job/b");
    } else {
      t1 = cm1.connect(0, "job/b");  // other order: tags keep them apart
      s1 = cm1.connect(0, "job/a");
    }
  });
  uint32_t v = 0xdeadbeef, got = 0;
  s1.send_all(&v, 4, 1.0);
  s0.recv_all(&got, 4, 1.0);
  EXPECT_EQ(got, v);
  v = 7;
  t0.send_all(&v, 4, 1.0);
  t1.recv_all(&got, 4, 1.0);
  EXPECT_EQ(got, uint32_t(7));
  EXPECT_EQ(cm0.rejected_connections(), 0);
}

HVD_TEST(accepted_connection_waits_unclaimed_until_connect_claims_it) {
  ConnectionManager cm0(0, "secret", "127.0.0.1", 5.0), cm1(1, "secret", "127.0.0.1", 5.0);
  cm1.set_peer_addresses({cm0.address(), cm1.address()});
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Socket s = cm0.connect(1, "late");
    uint8_t b = 0;
    s.recv_all(&b, 1, 2.0);
  });
  Socket s = cm1.connect(0, "late");
  uint8_t b = 1;
  s.send_all(&b, 1, 1.0);
  late.join();
}

HVD_TEST(wrong_secret_client_is_rejected_counted_and_never_handed_out) {
  ConnectionManager cm0(0, "right", "127.0.0.1", 1.0);
  int fd = raw_connect(port_of(cm0));
  std::string nonce(16, 'n'), tag = "job/x";
  std::string hello("HVD1", 4);
  put_u32(hello, 1);
  put_u32(hello, 0);
  hello.push_back(0);
  hello.push_back(static_cast<char>(tag.size()));
  hello += nonce + tag;
  EXPECT_TRUE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
  char reply[48];
  size_t got = 0;
  while (got < sizeof(reply)) {
    ssize_t n = ::read(fd, reply + got, sizeof(reply) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, sizeof(reply));
  // A proof made with the wrong secret.
  Digest256 proof = hmac_sha256("wrong", std::string("dialer|") + tag);
  EXPECT_TRUE(::write(fd, proof.data(), proof.size()) == 32);
  char ack;
  EXPECT_TRUE(::read(fd, &ack, 1) <= 0);  // closed, no 'K'
  ::close(fd);
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 1; }, 2.0));
  EXPECT_THROWS_CODE(cm0.connect(1, "job/x"), ErrorCode::kInternal);
}

// Found by fuzz_handshake: a hello from a rank that never dials this one
// (itself, a lower rank, one above INT_MAX that connect() cannot name) was
// answered and, with the right proof, parked as unclaimable until shutdown.
HVD_TEST(hello_from_a_rank_that_cannot_dial_here_is_rejected_unanswered) {
  ConnectionManager cm1(1, "secret", "127.0.0.1", 1.0);
  for (uint32_t dialer : {0u, 1u, 0x80000000u, 0xffffffffu}) {
    int fd = raw_connect(port_of(cm1));
    std::string hello = hello_for(dialer, 1, std::string(16, 'n'), "job/x");
    EXPECT_TRUE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
    EXPECT_EQ(read_n(fd, 48).size(), size_t(0));  // closed without a nonce or proof
    ::close(fd);
  }
  EXPECT_TRUE(wait_until([&] { return cm1.rejected_connections() >= 4; }, 2.0));
}

HVD_TEST(wrong_secret_peer_fails_to_connect_on_both_sides) {
  ConnectionManager cm0(0, "right", "127.0.0.1", 1.0), cm1(1, "wrong", "127.0.0.1", 1.0);
  std::vector<std::string> addresses{cm0.address(), cm1.address()};
  cm0.set_peer_addresses(addresses);
  cm1.set_peer_addresses(addresses);
  EXPECT_THROWS_CODE(cm1.connect(0, "t"), ErrorCode::kInternal);
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 1; }, 2.0));
  EXPECT_TRUE(cm1.rejected_connections() >= 1);
}

HVD_TEST(silent_and_garbage_clients_do_not_stall_a_good_connection) {
  ConnectionManager cm0(0, "secret", "127.0.0.1", 3.0), cm1(1, "secret", "127.0.0.1", 3.0);
  std::vector<std::string> addresses{cm0.address(), cm1.address()};
  cm0.set_peer_addresses(addresses);
  cm1.set_peer_addresses(addresses);
  int silent = raw_connect(port_of(cm0));
  int partial = raw_connect(port_of(cm0));
  EXPECT_TRUE(::write(partial, "HVD1\0\0", 6) == 6);  // a valid start, then nothing
  int garbage = raw_connect(port_of(cm0));
  std::string junk(4096, 'x');
  EXPECT_TRUE(::write(garbage, junk.data(), junk.size()) > 0);
  Socket s0, s1;
  EXPECT_TRUE(seconds_to_connect(cm0, cm1, "good", &s0, &s1) < 1.0);
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 1; }, 2.0));  // the garbage one
  // The silent ones are dropped at the handshake deadline.
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 3; }, 5.0));
  ::close(silent);
  ::close(partial);
  ::close(garbage);
}

HVD_TEST(listener_binds_only_the_given_address) {
  // 127.0.0.2 is a loopback address too; a listener on every interface
  // would answer on 127.0.0.1 as well.
  ConnectionManager cm(0, "secret", "127.0.0.2", 1.0);
  int port = port_of(cm);
  EXPECT_EQ(cm.bound_address(), "127.0.0.2:" + std::to_string(port));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_TRUE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0);
  ::close(fd);
  EXPECT_THROWS_CODE(ConnectionManager(0, "secret", "no-such-host.invalid", 1.0), ErrorCode::kInternal);
}

HVD_TEST(a_flood_of_silent_connections_does_not_keep_real_peers_out) {
  // Far more silent connections than the acceptor holds, all from the same
  // source as the real peers (a one-host job): the flooder's oldest are
  // shed, not the newcomers.
  ConnectionManager cm0(0, "secret", "127.0.0.1", 5.0), cm1(1, "secret", "127.0.0.1", 5.0);
  std::vector<std::string> addresses{cm0.address(), cm1.address()};
  cm0.set_peer_addresses(addresses);
  cm1.set_peer_addresses(addresses);
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(raw_connect(port_of(cm0)));
  Socket s0, s1;
  EXPECT_TRUE(seconds_to_connect(cm0, cm1, "real", &s0, &s1) < 3.0);
  uint8_t b = 42, got = 0;
  s1.send_all(&b, 1, 1.0);
  s0.recv_all(&got, 1, 1.0);
  EXPECT_EQ(got, uint8_t(42));
  for (int fd : silent) ::close(fd);
}

// A listening socket on 127.0.0.1 at a free port (a stand-in for a peer): its fd and address.
std::pair<int, std::string> loopback_listener() {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_TRUE(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  EXPECT_TRUE(::listen(lfd, 8) == 0);
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  return {lfd, "127.0.0.1:" + std::to_string(ntohs(addr.sin_port))};
}

HVD_TEST(dialer_retries_a_handshake_the_acceptor_reset) {
  // A stand-in for rank 0 that resets the first connection after reading
  // its hello, then completes the handshake on the next one.
  const auto listener = loopback_listener();
  const int lfd = listener.first;
  const std::string& listen_address = listener.second;
  const std::string tag = "retry";
  std::thread fake([&] {
    int first = ::accept(lfd, nullptr, nullptr);
    read_n(first, 30 + tag.size());
    linger hard{1, 0};  // close with RST: "Connection reset by peer" at the dialer
    setsockopt(first, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    ::close(first);
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) return;  // the dialer gave up after the reset
    std::string hello = read_n(fd, 30 + tag.size());
    std::string nonce_d = hello.substr(14, 16), nonce_a(16, 'a');
    std::string msg = "acceptor|" + tag + "|";
    put_u32(msg, 0);
    put_u32(msg, 1);
    Digest256 proof = hmac_sha256("secret", msg + nonce_d + nonce_a);
    std::string reply = nonce_a + std::string(reinterpret_cast<const char*>(proof.data()), proof.size());
    // No EXPECT here: a failure would leave this thread unjoined; the dialer's result tells.
    if (::write(fd, reply.data(), reply.size()) == static_cast<ssize_t>(reply.size()) &&
        read_n(fd, 32).size() == 32 && ::write(fd, "K", 1) == 1) {
      read_n(fd, 1);  // until the dialer closes
    }
    ::close(fd);
  });
  ConnectionManager cm1(1, "secret", "127.0.0.1", 5.0);
  cm1.set_peer_addresses({listen_address, cm1.address()});
  bool connected = false;
  try {
    Socket s = cm1.connect(0, tag);
    connected = s.valid();
  } catch (const Error& e) {
    std::fprintf(stderr, "connect failed: %s\n", e.what());
  }
  ::shutdown(lfd, SHUT_RDWR);  // wakes the stand-in if it still waits in accept()
  fake.join();
  ::close(lfd);
  EXPECT_TRUE(connected);
}

// Throws Interrupted once `after` seconds have passed since it was made.
Interrupt interrupt_after(double after) {
  const auto at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(after));
  return [at] {
    if (std::chrono::steady_clock::now() >= at) throw Interrupted(ErrorCode::kInternal, "the job failed meanwhile");
  };
}

// Runs cm.connect(peer, tag, interrupt); what it threw and after how long.
std::pair<std::string, double> interrupted_connect(ConnectionManager& cm, int peer, const std::string& tag,
                                                   const Interrupt& interrupt) {
  auto start = std::chrono::steady_clock::now();
  std::string what = "connected";
  try {
    cm.connect(peer, tag, interrupt);
  } catch (const Interrupted& e) {
    what = std::string("interrupted: ") + e.what();
  } catch (const Error& e) {
    what = std::string("other error: ") + e.what();
  }
  return {what, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

HVD_TEST(an_interrupt_ends_the_wait_for_a_peer_that_never_dials) {
  ConnectionManager cm0(0, "secret", "127.0.0.1", 30.0);
  cm0.set_peer_addresses({cm0.address(), "127.0.0.1:9"});
  auto [what, seconds] = interrupted_connect(cm0, 1, "never", interrupt_after(0.3));
  EXPECT_EQ(what, std::string("interrupted: the job failed meanwhile"));
  EXPECT_TRUE(seconds >= 0.3 && seconds < 2.0);
}

HVD_TEST(an_interrupt_ends_a_handshake_with_a_peer_that_never_answers) {
  // A frozen peer: its kernel accepts the connection, nothing ever answers
  // the hello. Without the interrupt the dialer waits out its 30 s.
  const auto listener = loopback_listener();
  const int lfd = listener.first;
  const std::string& listen_address = listener.second;
  ConnectionManager cm1(1, "secret", "127.0.0.1", 30.0);
  cm1.set_peer_addresses({listen_address, cm1.address()});
  auto [what, seconds] = interrupted_connect(cm1, 0, "frozen", interrupt_after(0.3));
  ::close(lfd);
  EXPECT_EQ(what, std::string("interrupted: the job failed meanwhile"));
  EXPECT_TRUE(seconds >= 0.3 && seconds < 2.0);
}

HVD_TEST(peer_supplied_tag_is_logged_escaped_and_capped) {
  ConnectionManager cm0(0, "right", "127.0.0.1", 2.0);
  // Terminal escapes, a newline that would forge a log line, and more
  // bytes than a log line should carry.
  const std::string tag = "\x1b[31mred\nFAKE WARNING" + std::string(200, 'A');
  // The log goes to stderr: capture it in a file for the duration.
  char path[] = "/tmp/hvd_cm_log_XXXXXX";
  int log_fd = mkstemp(path);
  EXPECT_TRUE(log_fd >= 0);
  std::fflush(stderr);
  int saved = ::dup(2);
  ::dup2(log_fd, 2);
  // No EXPECT until stderr is back: a failure report would land in the file.
  int fd = raw_connect(port_of(cm0));
  std::string hello = hello_for(1, 0, std::string(16, 'n'), tag);
  std::string wrong(32, 'w');  // not a proof made with the job secret
  bool sent = ::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()) &&
              read_n(fd, 48).size() == 48 && ::write(fd, wrong.data(), wrong.size()) == 32;
  bool rejected = wait_until([&] { return cm0.rejected_connections() >= 1; }, 2.0);
  ::close(fd);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  EXPECT_TRUE(sent);
  EXPECT_TRUE(rejected);
  std::string log;
  ::lseek(log_fd, 0, SEEK_SET);
  char buf[4096];
  for (ssize_t n; (n = ::read(log_fd, buf, sizeof(buf))) > 0;) log.append(buf, static_cast<size_t>(n));
  ::close(log_fd);
  ::unlink(path);
  std::fprintf(stderr, "captured: %s", log.c_str());
  EXPECT_TRUE(log.find("\\x1b[31mred\\x0aFAKE WARNING") != std::string::npos);
  EXPECT_TRUE(log.find("(" + std::to_string(tag.size()) + " bytes)") != std::string::npos);
  EXPECT_TRUE(log.find('\x1b') == std::string::npos);
  EXPECT_TRUE(log.find("\nFAKE") == std::string::npos);
  EXPECT_TRUE(log.find(std::string(100, 'A')) == std::string::npos);
}
