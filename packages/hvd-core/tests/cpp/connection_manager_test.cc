// connection_manager_test.cc - authenticated connections: good peers
// connect in either order, wrong secrets and garbage are rejected and
// counted, and a silent or garbage client never stalls a good one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "auth/hmac_sha256.h"
#include "common/error.h"
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

bool wait_until(const std::function<bool()>& cond, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace

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
  auto start = std::chrono::steady_clock::now();
  Socket s0, s1;
  ::hvd_test::run_members(2, [&](int m) {
    if (m == 0) s0 = cm0.connect(1, "good"); else s1 = cm1.connect(0, "good");
  });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(seconds < 1.0);
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 1; }, 2.0));  // the garbage one
  // The silent ones are dropped at the handshake deadline.
  EXPECT_TRUE(wait_until([&] { return cm0.rejected_connections() >= 3; }, 5.0));
  ::close(silent);
  ::close(partial);
  ::close(garbage);
}
