// fuzz_control_channel.cc - the control channel's framing driven by bytes a
// peer sends: the input is written into one end of a socket pair, which is
// then closed, and the ControlChannel on the other end takes frames until it
// reports the closed connection. Each frame's payload goes to the decoder
// its type names. Only hvd::Error may come out.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "engine/control_channel.h"
#include "engine/message.h"

namespace {

void decode(hvd::MessageType type, const std::string& payload) {
  try {
    switch (type) {
      case hvd::MessageType::kRequests: hvd::decode_requests(payload); break;
      case hvd::MessageType::kResponses: hvd::decode_responses(payload); break;
      case hvd::MessageType::kWaiting: hvd::decode_names(payload); break;
      case hvd::MessageType::kAbort: hvd::decode_failure(payload); break;
      default: break;
    }
  } catch (const hvd::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A socket pair holds this much without a reader on Linux's defaults.
  if (size > 64 * 1024) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(fds[0], data + sent, size - sent, 0);
    if (n <= 0) std::abort();
    sent += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  hvd::ControlChannel channel(hvd::Socket(fds[1]), "fuzz peer", 1.0);
  for (int frames = 0;; ++frames) {
    hvd::MessageType type;
    std::string payload;
    try {
      if (!channel.try_receive(&type, &payload)) break;
    } catch (const hvd::Error&) {
      break;
    }
    if (frames > static_cast<int>(size)) std::abort();  // more frames than bytes: no progress
    decode(type, payload);
  }
  return 0;
}
