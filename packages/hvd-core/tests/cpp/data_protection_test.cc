// data_protection_test.cc - the opt-in protected data plane
// (HOROVOD_DATA_AUTH / HOROVOD_DATA_ENCRYPT): ChaCha20 against RFC 8439,
// keyed HMAC against the one-shot one, per-link keys, and real sockets whose
// bytes the test carries between the two ends itself, changing, dropping,
// replaying or reordering them, which the receiver must refuse.
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "auth/chacha20.h"
#include "auth/hmac_sha256.h"
#include "common/error.h"
#include "net/connection_manager.h"
#include "net/socket.h"
#include "test_harness.h"

using namespace hvd;

namespace {

std::vector<uint8_t> from_hex(const std::string& text) {
  std::vector<uint8_t> out;
  std::string digits;
  for (char c : text) {
    if (std::isxdigit(static_cast<unsigned char>(c))) digits.push_back(c);
  }
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

const std::string kSecret = "0123456789abcdef0123456789abcdef";

// Keys of a link between dialer rank 1 and acceptor rank 0 under `tag`.
LinkKeys keys_for(bool dialer, const std::string& tag = "ps0/data", const std::string& nonce = "nonce-a") {
  return derive_link_keys(kSecret, tag, 1, 0, std::string(16, 'd'), nonce + std::string(16 - nonce.size(), 'x'),
                          dialer);
}

// Two protected sockets whose traffic passes through the test: `sender`
// writes into one socketpair, the test reads the wire bytes from its other
// end (`wire_in`) and writes what it likes to `wire_out`, read by `receiver`.
struct Tap {
  Socket sender, receiver;
  int wire_in = -1, wire_out = -1;

  explicit Tap(DataProtection mode, DataProtection receiver_mode = DataProtection::kNone) {
    int a[2], b[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, b) != 0) {
      ::hvd_test::fail(__FILE__, __LINE__, "socketpair failed");
    }
    sender = Socket(a[0]);
    wire_in = a[1];
    wire_out = b[0];
    receiver = Socket(b[1]);
    sender.set_peer_name("rank 0 (test acceptor)");
    receiver.set_peer_name("rank 1 (test dialer)");
    sender.protect(mode, keys_for(true));
    receiver.protect(receiver_mode == DataProtection::kNone ? mode : receiver_mode, keys_for(false));
  }
  ~Tap() {
    ::close(wire_in);
    ::close(wire_out);
  }
  std::string take_wire(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(wire_in, &out[got], n - got);
      if (r <= 0) ::hvd_test::fail(__FILE__, __LINE__, "wire read failed");
      got += static_cast<size_t>(r);
    }
    return out;
  }
  void put_wire(const std::string& bytes) {
    size_t put = 0;
    while (put < bytes.size()) {
      ssize_t w = ::write(wire_out, bytes.data() + put, bytes.size() - put);
      if (w <= 0) ::hvd_test::fail(__FILE__, __LINE__, "wire write failed");
      put += static_cast<size_t>(w);
    }
  }
};

std::string pattern(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return out;
}

// On the wire: each frame is a 4-byte length, the payload and a 32-byte MAC.
size_t wire_size(size_t payload) {
  size_t frames = (payload + kMaxFramePayload - 1) / kMaxFramePayload;
  return payload + frames * 36;
}

// The receiver's error for `wire` delivered in place of what was sent, or
// "" when it accepted `expect` bytes.
std::string receive_error(Tap& tap, const std::string& wire, size_t expect) {
  tap.put_wire(wire);
  ::shutdown(tap.wire_out, SHUT_WR);  // what follows the forged bytes: end of file
  std::string got(expect, '\0');
  try {
    tap.receiver.recv_all(&got[0], expect, 2.0);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

HVD_TEST(chacha20_matches_rfc_8439_test_vectors) {
  std::vector<uint8_t> key(32);
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i);
  // 2.3.2: the block function.
  std::vector<uint8_t> nonce = from_hex("000000090000004a00000000");
  uint8_t block[64];
  chacha20_block(key.data(), nonce.data(), 1, block);
  EXPECT_EQ(to_hex(block, 64),
            to_hex(from_hex("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                            "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")
                       .data(),
                   64));
  // 2.4.2: encryption of the "sunscreen" text, 114 bytes (a partial last block).
  nonce = from_hex("000000000000004a00000000");
  std::string text =
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would "
      "be it.";
  std::vector<uint8_t> data(text.begin(), text.end());
  chacha20_xor(key.data(), nonce.data(), 1, data.data(), data.size());
  std::vector<uint8_t> expected = from_hex(
      "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
      "f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8"
      "07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
      "5af90bbf74a35be6b40b8eedf2785e42874d");
  EXPECT_EQ(to_hex(data.data(), data.size()), to_hex(expected.data(), expected.size()));
  chacha20_xor(key.data(), nonce.data(), 1, data.data(), data.size());
  EXPECT_EQ(std::string(data.begin(), data.end()), text);
  // A.1 test vector 1: all-zero key and nonce, counter 0.
  std::vector<uint8_t> zero_key(32, 0), zero_nonce(12, 0);
  chacha20_block(zero_key.data(), zero_nonce.data(), 0, block);
  EXPECT_EQ(to_hex(block, 64), std::string("76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
                                           "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"));
}

HVD_TEST(chacha20_on_long_messages_is_the_rfc_block_function_block_after_block) {
  // Messages of 256 bytes and more take the four-blocks-at-once path, which
  // the short RFC texts do not reach: it must give the same keystream.
  std::vector<uint8_t> key(32), nonce = from_hex("000000000000004a00000000");
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(7 * i + 1);
  for (size_t size : {size_t(255), size_t(256), size_t(257), size_t(1000), size_t(4096 + 13)}) {
    for (uint32_t counter : {0u, 1u, 0xfffffffeu}) {
      std::vector<uint8_t> data(size, 0);
      chacha20_xor(key.data(), nonce.data(), counter, data.data(), size);
      std::vector<uint8_t> expected;
      for (uint32_t b = 0; expected.size() < size; ++b) {
        uint8_t block[64];
        chacha20_block(key.data(), nonce.data(), counter + b, block);
        expected.insert(expected.end(), block, block + 64);
      }
      expected.resize(size);
      if (data != expected) {
        ::hvd_test::fail(__FILE__, __LINE__, "keystream differs at size " + std::to_string(size) + ", counter " +
                                                 std::to_string(counter));
      }
    }
  }
}

HVD_TEST(keyed_hmac_over_pieces_equals_one_shot_hmac) {
  for (const std::string& key : {std::string(20, '\x0b'), std::string("Jefe"), std::string(131, '\xaa')}) {
    HmacSha256Key keyed(key);
    std::string message = pattern(1000);
    for (size_t split : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(999)}) {
      Sha256 inner = keyed.start();
      inner.update(message.data(), split);
      inner.update(message.data() + split, message.size() - split);
      EXPECT_EQ(to_hex(keyed.finish(inner)), to_hex(hmac_sha256(key, message)));
    }
  }
  HmacSha256Key jefe("Jefe");  // RFC 4231 case 2, through the keyed form
  Sha256 inner = jefe.start();
  inner.update("what do ya ", 11);
  inner.update("want for nothing?", 17);
  EXPECT_EQ(to_hex(jefe.finish(inner)), std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
}

HVD_TEST(link_keys_pair_up_across_ends_and_differ_per_direction_and_link) {
  LinkKeys dialer = keys_for(true), acceptor = keys_for(false);
  EXPECT_TRUE(dialer.send_mac == acceptor.receive_mac);
  EXPECT_TRUE(dialer.receive_mac == acceptor.send_mac);
  EXPECT_TRUE(dialer.send_cipher == acceptor.receive_cipher);
  EXPECT_TRUE(dialer.send_mac != dialer.receive_mac);
  EXPECT_TRUE(dialer.send_mac != dialer.send_cipher);
  EXPECT_EQ(dialer.send_mac.size(), size_t(32));
  EXPECT_TRUE(keys_for(true, "ps0/data", "nonce-b").send_mac != dialer.send_mac);  // another connection
  EXPECT_TRUE(keys_for(true, "ps0/ctrl").send_mac != dialer.send_mac);             // another purpose
}

HVD_TEST(protected_bytes_arrive_intact_and_encrypted_ones_are_not_readable_on_the_wire) {
  for (DataProtection mode : {DataProtection::kAuthenticate, DataProtection::kEncrypt}) {
    Tap tap(mode);
    std::string message = pattern(150000);  // three frames
    tap.sender.send_all(message.data(), message.size(), 2.0);
    std::string wire = tap.take_wire(wire_size(message.size()));
    bool clear_on_wire = contains(wire, message.substr(1000, 64));
    EXPECT_EQ(clear_on_wire, mode == DataProtection::kAuthenticate);
    tap.put_wire(wire);
    // Read in odd pieces: frames are invisible to the byte stream.
    std::string got(message.size(), '\0');
    tap.receiver.recv_all(&got[0], 5, 2.0);
    tap.receiver.recv_all(&got[5], 70000, 2.0);
    tap.receiver.recv_all(&got[70005], message.size() - 70005, 2.0);
    EXPECT_TRUE(got == message);
  }
}

HVD_TEST(a_changed_byte_anywhere_in_a_frame_is_refused_naming_the_peer) {
  for (DataProtection mode : {DataProtection::kAuthenticate, DataProtection::kEncrypt}) {
    std::string message = pattern(100000);  // frames of 65536 and 34464 bytes
    size_t first = 4 + kMaxFramePayload + 32;
    // Length, first payload byte, a payload byte, the MAC, the second frame's payload.
    for (size_t at : {size_t(3), size_t(4), size_t(4 + 30000), first - 1, first + 4 + 100}) {
      Tap tap(mode);
      tap.sender.send_all(message.data(), message.size(), 2.0);
      std::string wire = tap.take_wire(wire_size(message.size()));
      wire[at] = static_cast<char>(wire[at] ^ 0x01);
      std::string error = receive_error(tap, wire, message.size());
      if (!contains(error, "data from rank 1 (test dialer) failed authentication")) {
        ::hvd_test::fail(__FILE__, __LINE__, "byte " + std::to_string(at) + " changed, got: '" + error + "'");
      }
    }
    // Unchanged, the same bytes are accepted (the test can tell).
    Tap tap(mode);
    tap.sender.send_all(message.data(), message.size(), 2.0);
    EXPECT_EQ(receive_error(tap, tap.take_wire(wire_size(message.size())), message.size()), std::string());
  }
}

HVD_TEST(replayed_reordered_dropped_and_foreign_frames_are_refused) {
  std::string a = pattern(1000), b = pattern(2000);
  auto frames = [&](Tap& tap) {
    tap.sender.send_all(a.data(), a.size(), 2.0);
    std::string fa = tap.take_wire(wire_size(a.size()));
    tap.sender.send_all(b.data(), b.size(), 2.0);
    std::string fb = tap.take_wire(wire_size(b.size()));
    return std::make_pair(fa, fb);
  };
  {
    Tap tap(DataProtection::kAuthenticate);
    auto [fa, fb] = frames(tap);
    EXPECT_TRUE(contains(receive_error(tap, fa + fa, 2000), "failed authentication"));  // replayed
  }
  {
    Tap tap(DataProtection::kAuthenticate);
    auto [fa, fb] = frames(tap);
    EXPECT_TRUE(contains(receive_error(tap, fb + fa, 3000), "failed authentication"));  // reordered
  }
  {
    Tap tap(DataProtection::kAuthenticate);
    auto [fa, fb] = frames(tap);
    EXPECT_TRUE(contains(receive_error(tap, fb, 2000), "failed authentication"));  // first one dropped
  }
  {
    Tap other(DataProtection::kAuthenticate);  // same keys: what makes links differ is their handshake nonces
    other.sender.protect(DataProtection::kAuthenticate, keys_for(true, "ps0/data", "nonce-b"));
    auto [fa, fb] = frames(other);
    Tap tap(DataProtection::kAuthenticate);
    EXPECT_TRUE(contains(receive_error(tap, fa, 1000), "failed authentication"));  // from another connection
  }
}

HVD_TEST(a_peer_that_does_not_protect_its_bytes_is_refused) {
  Tap tap(DataProtection::kAuthenticate);
  tap.sender.protect(DataProtection::kNone, LinkKeys{});
  std::string message = pattern(1000);
  tap.sender.send_all(message.data(), message.size(), 2.0);
  std::string error = receive_error(tap, tap.take_wire(message.size()), message.size());
  EXPECT_TRUE(contains(error, "data from rank 1 (test dialer) failed authentication"));
  EXPECT_TRUE(contains(error, "HOROVOD_DATA_AUTH"));
  // Every later read fails the same way; none hands out bytes.
  char byte;
  EXPECT_THROWS_CODE(tap.receiver.recv_all(&byte, 1, 0.1), ErrorCode::kInternal);
}

HVD_TEST(connection_manager_protects_both_ends_of_every_connection) {
  for (DataProtection mode : {DataProtection::kAuthenticate, DataProtection::kEncrypt}) {
    ConnectionManager cm0(0, kSecret, "127.0.0.1", 5.0, mode), cm1(1, kSecret, "127.0.0.1", 5.0, mode);
    std::vector<std::string> addresses{cm0.address(), cm1.address()};
    cm0.set_peer_addresses(addresses);
    cm1.set_peer_addresses(addresses);
    Socket s0, s1;
    ::hvd_test::run_members(2, [&](int m) {
      if (m == 0) s0 = cm0.connect(1, "job/data"); else s1 = cm1.connect(0, "job/data");
    });
    EXPECT_TRUE(s0.protection() == mode);
    EXPECT_TRUE(s1.protection() == mode);
    std::string up = pattern(300000), down = pattern(1000), got_up(up.size(), '\0'), got_down(down.size(), '\0');
    ::hvd_test::run_members(2, [&](int m) {
      if (m == 0) {
        s0.recv_all(&got_up[0], up.size(), 5.0);
        s0.send_all(down.data(), down.size(), 5.0);
      } else {
        s1.send_all(up.data(), up.size(), 5.0);
        s1.recv_all(&got_down[0], down.size(), 5.0);
      }
    });
    EXPECT_TRUE(got_up == up);
    EXPECT_TRUE(got_down == down);
  }
}
