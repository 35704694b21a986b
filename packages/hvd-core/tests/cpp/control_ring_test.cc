// control_ring_test.cc - the shared-memory ring under same-host control
// channels: bytes arrive whole and in order across wrap-around, a segment
// that is not the one offered is refused, and a channel over a ring keeps the
// TCP channel's guarantees (messages larger than the ring, waking a sleeping
// reader, a goodbye written just before the peer exits still arrives).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/error.h"
#include "engine/control_channel.h"
#include "transport/shm/shm_ring.h"
#include "test_harness.h"

using namespace hvd;

namespace {

std::string ring_name(const char* test) { return ShmRing::name_for(std::string(test) + std::to_string(getpid())); }

// Two channels joined by a socket pair and a fresh ring of `capacity` bytes.
struct ChannelPair {
  ControlChannel a, b;
  ChannelPair(const char* test, size_t capacity) {
    int fds[2];
    EXPECT_TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    a = ControlChannel(Socket(fds[0]), "peer b", 5.0);
    b = ControlChannel(Socket(fds[1]), "peer a", 5.0);
    const std::string name = ring_name(test);
    auto created = ShmRing::create(name, capacity, "nonce");
    std::string why;
    auto attached = ShmRing::attach(name, "nonce", &why);
    ShmRing::unlink(name);
    EXPECT_TRUE(attached != nullptr);
    a.use_ring(std::move(created));
    b.use_ring(std::move(attached));
  }
};

// Keeps calling try_receive (which also pushes out a sender's unsent bytes)
// until a message arrives or two seconds pass.
bool receive_within(ControlChannel& ch, MessageType* type, std::string* payload) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ch.try_receive(type, payload)) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

HVD_TEST(ring_carries_bytes_in_order_across_wrap_around) {
  const std::string name = ring_name("order");
  auto writer = ShmRing::create(name, 4096, "n");
  std::string why;
  auto reader = ShmRing::attach(name, "n", &why);
  ShmRing::unlink(name);
  EXPECT_TRUE(reader != nullptr);
  std::string sent;
  for (size_t i = 0; i < 300000; ++i) sent.push_back(static_cast<char>((i * 2654435761u) >> 13));
  std::string received;
  std::thread producer([&] {
    size_t at = 0, chunk = 1;
    while (at < sent.size()) {
      at += writer->write(sent.data() + at, std::min(chunk, sent.size() - at));
      chunk = chunk * 7 % 5003 + 1;  // sizes from 1 byte to more than the ring
    }
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (received.size() < sent.size() && std::chrono::steady_clock::now() < deadline) reader->read_into(&received);
  producer.join();
  EXPECT_EQ(received.size(), sent.size());
  EXPECT_TRUE(received == sent);
}

HVD_TEST(ring_attach_refuses_a_segment_with_another_nonce) {
  const std::string name = ring_name("nonce");
  auto ring = ShmRing::create(name, 4096, "the offered nonce");
  std::string why;
  EXPECT_TRUE(ShmRing::attach(name, "some other nonce", &why) == nullptr);
  EXPECT_TRUE(why.find("not the ring that was offered") != std::string::npos);
  ShmRing::unlink(name);
  EXPECT_TRUE(ShmRing::attach(name, "the offered nonce", &why) == nullptr);  // gone once unlinked
}

HVD_TEST(channel_over_ring_delivers_messages_larger_than_the_ring_in_order) {
  ChannelPair pair("large", 4096);
  const std::string big(100000, 'x');
  std::atomic<bool> done{false};
  std::thread sender([&] {
    pair.a.send(MessageType::kRequests, "first");
    pair.a.send(MessageType::kResponses, big);
    pair.a.send(MessageType::kWaiting, "last");
    MessageType type;
    std::string payload;
    while (!done.load()) pair.a.try_receive(&type, &payload);  // flushes what the ring could not take
  });
  MessageType type;
  std::string payload;
  bool got = receive_within(pair.b, &type, &payload);
  EXPECT_TRUE(got && type == MessageType::kRequests && payload == "first");
  got = receive_within(pair.b, &type, &payload);
  EXPECT_TRUE(got && type == MessageType::kResponses && payload == big);
  got = receive_within(pair.b, &type, &payload);
  EXPECT_TRUE(got && type == MessageType::kWaiting && payload == "last");
  done = true;
  sender.join();
}

HVD_TEST(a_reader_sleeping_in_poll_is_woken_by_a_message_on_the_ring) {
  ChannelPair pair("doorbell", 4096);
  EXPECT_TRUE(pair.b.prepare_to_sleep());
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pair.a.send(MessageType::kRequests, "wake up");
  });
  pollfd p{pair.b.fd(), POLLIN, 0};
  auto start = std::chrono::steady_clock::now();
  int ready = ::poll(&p, 1, 3000);
  auto slept = std::chrono::steady_clock::now() - start;
  sender.join();
  EXPECT_EQ(ready, 1);
  EXPECT_TRUE(slept < std::chrono::seconds(2));
  pair.b.awake();
  MessageType type;
  std::string payload;
  EXPECT_TRUE(pair.b.try_receive(&type, &payload));
  EXPECT_TRUE(payload == "wake up");
  EXPECT_TRUE(!pair.b.try_receive(&type, &payload));  // takes the doorbell off the socket
  // Awake readers cost the sender no system call: nothing more on the socket.
  pair.a.send(MessageType::kRequests, "no bell");
  p.revents = 0;
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  // A reader that finds bytes already waiting does not go to sleep.
  EXPECT_TRUE(!pair.b.prepare_to_sleep());
}

HVD_TEST(a_goodbye_written_just_before_the_peer_exits_arrives_before_the_closed_error) {
  ChannelPair pair("goodbye", 4096);
  pair.a.send(MessageType::kGoodbye, "");
  pair.a.close();
  MessageType type;
  std::string payload;
  EXPECT_TRUE(receive_within(pair.b, &type, &payload));
  EXPECT_TRUE(type == MessageType::kGoodbye);
  std::string error;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (error.empty() && std::chrono::steady_clock::now() < deadline) {
    try {
      pair.b.try_receive(&type, &payload);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_TRUE(error.find("peer a closed its connection") != std::string::npos);
}
