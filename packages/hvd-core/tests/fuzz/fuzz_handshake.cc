// fuzz_handshake.cc - the acceptor side of the peer handshake
// (net/connection_manager.cc) fed by a dialer that sends arbitrary bytes.
// One real ConnectionManager (rank 0, listening on 127.0.0.1) lives for the
// whole run; each input opens a TCP connection to it.
//
// Input: byte 0 is the mode, bytes 1-2 (big-endian) the length of the
// "hello" part, the rest follows it.
//   mode bit 0 clear: all bytes after the header are sent, the write side is
//     shut, and the acceptor must close the connection (it cannot be
//     authenticated without the secret) within the handshake timeout.
//   mode bit 0 set: the dialer knows the secret. It sends the hello part,
//     reads the acceptor's nonce and proof, answers with the proof the
//     protocol asks for (bit 1 set: with one bit flipped), then sends the
//     rest as data. When the hello was a well-formed one for rank 0 from a
//     higher rank and the proof right, the acceptor must answer 'K' and
//     hand the connection to connect(dialer, tag), with the data after the
//     proof unread; otherwise it must close the connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "auth/hmac_sha256.h"
#include "common/error.h"
#include "net/connection_manager.h"
#include "net/socket.h"

namespace {

constexpr char kSecret[] = "fuzz-job-secret";
// The acceptor gives a handshake max(1 s, min(timeout, 5 s)); a connection
// still open well after that is a hang.
constexpr double kTimeoutSeconds = 1.0;
constexpr int kHangMs = 10000;

hvd::ConnectionManager& manager() {
  static auto* cm = new hvd::ConnectionManager(0, kSecret, "127.0.0.1", kTimeoutSeconds);
  return *cm;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_handshake: %s\n", what);
  std::abort();
}

int dial() {
  static sockaddr_in addr = [] {
    std::string a = manager().bound_address();
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(static_cast<uint16_t>(std::stoi(a.substr(a.rfind(':') + 1))));
    inet_pton(AF_INET, a.substr(0, a.rfind(':')).c_str(), &s.sin_addr);
    return s;
  }();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fail("cannot connect");
  return fd;
}

void send_bytes(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the acceptor closed: allowed, it may reject early
    sent += static_cast<size_t>(n);
  }
}

// Reads exactly `n` bytes; false at EOF or reset before that. Aborts when
// the acceptor neither answers nor closes.
bool recv_bytes(int fd, size_t n, std::string* out) {
  out->clear();
  while (out->size() < n) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kHangMs) != 1) fail("the acceptor neither answered nor closed the connection");
    char buf[256];
    ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out->size()), 0);
    if (got <= 0) return false;
    out->append(buf, static_cast<size_t>(got));
  }
  return true;
}

// Reads until EOF; aborts when the acceptor keeps the connection open.
void expect_close(int fd) {
  std::string ignored;
  while (recv_bytes(fd, 1, &ignored)) {
  }
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (24 - 8 * i)));
}
uint32_t get_u32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// The dialer's proof as the protocol (connection_manager.cc's header) defines it.
std::string dialer_proof(const std::string& tag, uint32_t dialer, uint32_t acceptor, const std::string& nonce_d,
                         const std::string& nonce_a) {
  std::string msg = "dialer|" + tag + "|";
  put_u32(msg, dialer);
  put_u32(msg, acceptor);
  msg += nonce_d;
  msg += nonce_a;
  hvd::Digest256 d = hvd::hmac_sha256(kSecret, msg);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every rejection is logged as a warning; millions of them say nothing.
  setenv("HOROVOD_LOG_LEVEL", "fatal", 1);
  manager();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3 || size > 4096) return 0;
  const uint8_t mode = data[0];
  const size_t split = std::min<size_t>((size_t(data[1]) << 8) | data[2], size - 3);
  const std::string hello(reinterpret_cast<const char*>(data) + 3, split);
  const std::string rest(reinterpret_cast<const char*>(data) + 3 + split, size - 3 - split);
  const int fd = dial();

  if ((mode & 1) == 0) {
    send_bytes(fd, hello + rest);
    ::shutdown(fd, SHUT_WR);
    expect_close(fd);
    ::close(fd);
    return 0;
  }

  send_bytes(fd, hello);
  // Whether the acceptor should accept this hello: magic, addressed to
  // rank 0, from a higher rank that fits an int, a tag of 1..1024 bytes,
  // nothing extra.
  bool well_formed = hello.size() >= 30 && hello.compare(0, 4, "HVD1") == 0 && get_u32(hello, 8) == 0;
  uint32_t dialer = 0;
  std::string tag, nonce_d;
  if (well_formed) {
    dialer = get_u32(hello, 4);
    size_t tag_len = (size_t(uint8_t(hello[12])) << 8) | uint8_t(hello[13]);
    nonce_d = hello.substr(14, 16);
    well_formed = dialer > 0 && dialer <= 0x7fffffffu && tag_len >= 1 && tag_len <= 1024 && hello.size() == 30 + tag_len;
    if (well_formed) tag = hello.substr(30);
  }
  std::string reply;
  if (!well_formed) {
    // A short hello leaves the acceptor waiting for more: end it.
    ::shutdown(fd, SHUT_WR);
    expect_close(fd);
    ::close(fd);
    return 0;
  }
  if (!recv_bytes(fd, 48, &reply)) fail("a well-formed hello was not answered with a nonce and a proof");
  std::string proof = dialer_proof(tag, dialer, 0, nonce_d, reply.substr(0, 16));
  const bool corrupt = (mode & 2) != 0;
  if (corrupt) proof[rest.size() % proof.size()] ^= static_cast<char>(1u << (mode >> 5));
  send_bytes(fd, proof + rest);
  std::string ack;
  if (corrupt) {
    ::shutdown(fd, SHUT_WR);
    if (recv_bytes(fd, 1, &ack)) fail("a wrong proof was accepted");
    ::close(fd);
    return 0;
  }
  if (!recv_bytes(fd, 1, &ack) || ack != "K") fail("a right proof was not acknowledged");
  hvd::Socket claimed;
  try {
    claimed = manager().connect(static_cast<int>(dialer), tag);
  } catch (const hvd::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("an acknowledged connection was not handed to connect()");
  }
  // The data after the proof belongs to the connection's user.
  std::string got(rest.size(), '\0');
  if (!rest.empty()) {
    try {
      claimed.recv_all(&got[0], got.size(), 10.0);
    } catch (const hvd::Error& e) {
      fail("the data sent after the proof did not reach the connection's user");
    }
    if (got != rest) fail("the data sent after the proof was changed");
  }
  ::close(fd);
  return 0;
}
