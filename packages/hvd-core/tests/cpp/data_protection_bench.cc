// data_protection_bench.cc - what HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT
// cost one link: the throughput of HMAC-SHA256 and ChaCha20 on one core, and
// of one loopback TCP connection (made by ConnectionManager, as the engine
// makes them) streaming 64 MiB messages one way, per protection mode.
//
//   ./build/dev/tests/cpp/data_protection_bench [seconds per measurement, default 2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "auth/chacha20.h"
#include "auth/hmac_sha256.h"
#include "net/connection_manager.h"

using namespace hvd;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// MB/s (1e6 bytes) of `step` over `bytes` bytes, repeated for about `seconds`.
template <typename Step>
double throughput(size_t bytes, double seconds, Step step) {
  size_t done = 0;
  auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    step();
    done += bytes;
  }
  return done / seconds_since(start) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  std::vector<uint8_t> frame(64 * 1024, 7);
  HmacSha256Key key(std::string(32, 'k'));
  std::printf("HMAC-SHA256, 64 KiB frames: %.0f MB/s\n", throughput(frame.size(), seconds, [&] {
                Sha256 inner = key.start();
                inner.update(frame.data(), frame.size());
                volatile uint8_t sink = key.finish(inner)[0];
                (void)sink;
              }));
  uint8_t cipher_key[32] = {1}, nonce[12] = {2};
  std::printf("ChaCha20, 64 KiB frames: %.0f MB/s\n", throughput(frame.size(), seconds, [&] {
                chacha20_xor(cipher_key, nonce, 0, frame.data(), frame.size());
              }));

  const size_t message = 64u << 20;
  for (DataProtection mode : {DataProtection::kNone, DataProtection::kAuthenticate, DataProtection::kEncrypt}) {
    ConnectionManager cm0(0, "bench-secret", "127.0.0.1", 10.0, mode), cm1(1, "bench-secret", "127.0.0.1", 10.0, mode);
    std::vector<std::string> addresses{cm0.address(), cm1.address()};
    cm0.set_peer_addresses(addresses);
    cm1.set_peer_addresses(addresses);
    Socket s0, s1;
    std::thread dial([&] { s1 = cm1.connect(0, "bench"); });
    s0 = cm0.connect(1, "bench");
    dial.join();
    std::vector<char> out(message, 1), in(message);
    size_t rounds = 0;
    auto start = Clock::now();
    while (seconds_since(start) < seconds || rounds == 0) {
      std::thread sender([&] { s1.send_all(out.data(), out.size(), 10.0); });
      s0.recv_all(in.data(), in.size(), 10.0);
      sender.join();
      ++rounds;
    }
    const char* name = mode == DataProtection::kNone ? "none" : mode == DataProtection::kAuthenticate ? "auth" : "encrypt";
    std::printf("loopback TCP link, %s: %.0f MB/s\n", name, rounds * message / seconds_since(start) / 1e6);
  }
  return 0;
}
