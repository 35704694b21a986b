// http_store.cc - the engine's client of the job's rendezvous store: one
// HMAC-signed HTTP/1.1 request per connection, long-poll gets, retries until
// the caller's deadline. The protocol is docs/rendezvous.md; the server is
// horovod/common/rendezvous.py.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <thread>

#include "auth/hmac_sha256.h"
#include "common/env.h"
#include "common/deadline.h"
#include "common/error.h"
#include "common/logging.h"
#include "rendezvous/http_response.h"
#include "rendezvous/store.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

// The server answers a long-poll after at most this long (MAX_WAIT_SECONDS in
// rendezvous.py); longer waits are split into repeated requests.
constexpr double kMaxWaitPerRequestSeconds = 30.0;
// An interruptible get() asks again this often (each time a new request, so
// not as often as kInterruptSliceSeconds).
constexpr double kInterruptiblePollSeconds = 0.5;
// Extra time allowed for a response beyond the requested wait, so a loaded
// server that is late by a little is not mistaken for a dead one.
constexpr double kResponseSlackSeconds = 10.0;
constexpr double kDefaultOperationTimeoutSeconds = 30.0;
constexpr int kMaxClockSkewSeconds = 300;
// The store holds values of at most 16 MiB, and its headers are short: a
// response beyond this (before its signature can even be checked) is not from
// the store, and reading stops there rather than buffering it.
constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;
constexpr size_t kMaxResponseBodyBytes = 16 * 1024 * 1024;

using http::HttpResponse;
using http::parse_response;
using http::TransportFailure;
using http::trim;

class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Waits until `fd` is ready for `events` or the deadline passes; false on timeout.
bool poll_until(int fd, short events, Clock::time_point deadline) {
  while (true) {
    double remaining = seconds_until(deadline);
    if (remaining <= 0) return false;
    pollfd p{fd, events, 0};
    int timeout_ms = static_cast<int>(std::min(remaining * 1000.0 + 1.0, 60000.0));
    int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the following I/O call report the error
  }
}

// Connects without blocking past the deadline; tries every resolved address.
int connect_with_deadline(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &resolved);
  if (rc != 0) {
    throw TransportFailure(std::string("cannot resolve host: ") + ::gai_strerror(rc), false);
  }
  std::string last_error = "no address";
  for (addrinfo* ai = resolved; ai != nullptr; ai = ai->ai_next) {
    OwnedFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = std::string("connect: ") + std::strerror(errno);
        continue;
      }
      if (!poll_until(fd.get(), POLLOUT, deadline)) {
        last_error = "connect: timed out";
        continue;
      }
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error != 0) {
        last_error = std::string("connect: ") + std::strerror(so_error);
        continue;
      }
    }
    ::freeaddrinfo(resolved);
    return fd.release();
  }
  ::freeaddrinfo(resolved);
  throw TransportFailure(last_error, false);
}

void send_all(int fd, const std::string& data, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!poll_until(fd, POLLOUT, deadline)) throw TransportFailure("send: timed out", true);
    } else {
      throw TransportFailure(std::string("send: ") + std::strerror(errno), true);
    }
  }
}

// The server closes the connection after its response (we send
// "Connection: close"), so the response is everything up to EOF.
std::string recv_until_eof(int fd, Clock::time_point deadline) {
  std::string data;
  char buffer[16384];
  size_t limit = kMaxResponseHeaderBytes;  // until the headers have ended
  bool headers_seen = false;
  while (true) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      data.append(buffer, static_cast<size_t>(n));
      if (!headers_seen) {
        size_t header_end = data.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          headers_seen = true;
          limit = header_end + 4 + kMaxResponseBodyBytes;
        }
      }
      if (data.size() > limit) {
        throw TransportFailure("the response exceeds " + std::to_string(limit) + " bytes (" +
                                   (headers_seen ? "a body over 16 MiB" : "headers over 64 KiB") +
                                   "): not an answer of the rendezvous store",
                               true);
      }
    } else if (n == 0) {
      return data;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!poll_until(fd, POLLIN, deadline)) throw TransportFailure("no response: timed out", true);
    } else {
      throw TransportFailure(std::string("recv: ") + std::strerror(errno), true);
    }
  }
}

// Percent-encodes every byte outside the RFC 3986 unreserved set, so a key
// is always exactly one path segment.
std::string encode_key(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds);
  return text;
}

class HttpStore : public Store {
 public:
  HttpStore(std::string host, int port, std::string secret, double operation_timeout_seconds)
      : host_(std::move(host)), port_(port), secret_(std::move(secret)),
        operation_timeout_(operation_timeout_seconds) {
    if (secret_.empty()) {
      throw_error(ErrorCode::kInvalidArgument,
                  "rendezvous store " + address() + ": the job secret is empty; set "
                  "HOROVOD_SECRET_KEY to the launcher's secret");
    }
  }

  void set(const std::string& key, const std::string& value) override {
    call("PUT", "/v1/kv/" + encode_key(key), value, deadline_after(operation_timeout_),
         operation_timeout_, /*idempotent=*/true, "set '" + key + "'", {204});
  }

  void try_set(const std::string& key, const std::string& value, double timeout_seconds) override {
    try {
      call("PUT", "/v1/kv/" + encode_key(key), value, deadline_after(timeout_seconds), timeout_seconds,
           /*idempotent=*/true, "set '" + key + "'", {204});
    } catch (const std::exception&) {
    }
  }

  std::string get(const std::string& key, double timeout_seconds) override {
    return get_interruptible(key, timeout_seconds, {});
  }

  std::string get_interruptible(const std::string& key, double timeout_seconds,
                                const Interrupt& interrupt) override {
    Clock::time_point deadline = deadline_after(timeout_seconds);
    std::string path = "/v1/kv/" + encode_key(key);
    std::string what = "get '" + key + "'";
    while (true) {
      if (interrupt) interrupt();
      double wait = std::min(std::max(0.0, seconds_until(deadline)),
                             interrupt ? kInterruptiblePollSeconds : kMaxWaitPerRequestSeconds);
      HttpResponse response = call("GET", path + "?wait=" + format_seconds(wait), "", deadline,
                                   timeout_seconds, /*idempotent=*/true, what, {200, 404});
      if (response.status == 200) return response.body;
      if (seconds_until(deadline) <= 0) {
        throw_error(ErrorCode::kInternal,
                    "rendezvous: key '" + key + "' did not appear in the rendezvous store " +
                        address() + " within " + format_seconds(timeout_seconds) +
                        " s; the rank that should publish it may have failed or not started "
                        "(raise HOROVOD_GLOO_TIMEOUT_SECONDS if start-up is just slow)");
      }
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    HttpResponse response =
        call("POST", "/v1/add/" + encode_key(key), std::to_string(delta),
             deadline_after(operation_timeout_), operation_timeout_, /*idempotent=*/false,
             "add to '" + key + "'", {200});
    char* end = nullptr;
    long long value = std::strtoll(response.body.c_str(), &end, 10);
    if (response.body.empty() || *end != '\0') {
      throw_error(ErrorCode::kInternal, "rendezvous store " + address() + " answered add to '" + key +
                                            "' with a non-integer: '" + response.body + "'");
    }
    return value;
  }

 private:
  std::string address() const { return host_ + ":" + std::to_string(port_); }

  // Sends one request, resending after transport failures (with back-off)
  // until `deadline`; authentication and protocol failures are not retried.
  HttpResponse call(const std::string& method, const std::string& target, const std::string& body,
                    Clock::time_point deadline, double timeout_seconds, bool idempotent,
                    const std::string& what, std::initializer_list<int> expected_statuses) {
    double backoff = 0.05;
    bool warned = false;
    while (true) {
      try {
        HttpResponse response = send_once(method, target, body, deadline, what);
        for (int status : expected_statuses) {
          if (response.status == status) return response;
        }
        throw_error(ErrorCode::kInternal, "rendezvous store " + address() + ": " + what +
                                              " failed with HTTP " + std::to_string(response.status) +
                                              " " + trim(response.body));
      } catch (const TransportFailure& failure) {
        if (failure.maybe_applied() && !idempotent) {
          throw_error(ErrorCode::kInternal,
                      "rendezvous store " + address() + ": " + what + " failed after the request was sent (" +
                          failure.what() + "); not retried since the store may have applied it");
        }
        if (seconds_until(deadline) <= backoff) {
          throw_error(ErrorCode::kInternal,
                      "cannot reach the rendezvous store " + address() + " to " + what + " within " +
                          format_seconds(timeout_seconds) + " s: " + failure.what() +
                          "; check HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT and that the launcher is running");
        }
        if (!warned) {
          HVD_LOG(kDebug, "rendezvous store " << address() << " unreachable (" << failure.what()
                                              << "); retrying until the timeout");
          warned = true;
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
        backoff = std::min(backoff * 2, 1.0);
      }
    }
  }

  HttpResponse send_once(const std::string& method, const std::string& target,
                         const std::string& body, Clock::time_point deadline,
                         const std::string& what) {
    std::string timestamp = std::to_string(static_cast<long long>(std::time(nullptr)));
    std::string nonce = random_hex(16);
    std::string body_digest = to_hex(sha256(body.data(), body.size()));
    std::string canonical =
        "hvd-rendezvous-v1\n" + method + "\n" + target + "\n" + timestamp + "\n" + nonce + "\n" + body_digest;
    std::string signature = to_hex(hmac_sha256(secret_, canonical));

    std::string request = method + " " + target + " HTTP/1.1\r\n" + "Host: " + address() +
                          "\r\nConnection: close\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nX-Hvd-Timestamp: " + timestamp +
                          "\r\nX-Hvd-Nonce: " + nonce + "\r\nX-Hvd-Signature: " + signature +
                          // The store checks the signature against this digest before it reads the body.
                          "\r\nX-Hvd-Content-SHA256: " + body_digest + "\r\n\r\n" + body;

    // Connecting gets at least a second even when the caller's deadline is
    // (nearly) past, so get(key, 0) still means "look once".
    OwnedFd fd(connect_with_deadline(host_, port_, std::max(deadline, deadline_after(1.0))));
    // The response may take the requested long-poll wait plus some slack.
    Clock::time_point io_deadline = deadline_after(
        std::max(seconds_until(deadline), 1.0) + kResponseSlackSeconds);
    send_all(fd.get(), request, io_deadline);
    HttpResponse response = parse_response(recv_until_eof(fd.get(), io_deadline));

    if (response.status == 401) {
      throw_error(ErrorCode::kInternal,
                  "rendezvous store " + address() + " rejected " + what + ": " + trim(response.body) +
                      "; HOROVOD_SECRET_KEY must be the launcher's secret and this host's clock "
                      "within " + std::to_string(kMaxClockSkewSeconds) + " s of the store's");
    }
    // A signed response proves the answer comes from a holder of the job
    // secret and belongs to this very request (it binds our nonce).
    std::string response_canonical = "hvd-rendezvous-v1-response\n" +
                                     std::to_string(response.status) + "\n" + nonce + "\n" +
                                     to_hex(sha256(response.body.data(), response.body.size()));
    std::string expected = to_hex(hmac_sha256(secret_, response_canonical));
    auto signature_header = response.headers.find("x-hvd-signature");
    std::string received;
    if (signature_header != response.headers.end()) {
      received = signature_header->second;
      std::transform(received.begin(), received.end(), received.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    }
    if (!constant_time_equal(expected, received)) {
      throw_error(ErrorCode::kInternal,
                  "the answer from " + address() + " to " + what +
                      " is not signed with the job secret: that address is not this job's "
                      "rendezvous store, or its secret differs from HOROVOD_SECRET_KEY");
    }
    return response;
  }

  std::string host_;
  int port_;
  std::string secret_;
  double operation_timeout_;
};

}  // namespace

std::unique_ptr<Store> make_http_store(const std::string& host, int port, const std::string& secret,
                                       double operation_timeout_seconds) {
  return std::make_unique<HttpStore>(host, port, secret, operation_timeout_seconds);
}

std::unique_ptr<Store> make_http_store(const std::string& host, int port,
                                       const std::string& secret) {
  return make_http_store(host, port, secret,
                         env_double("HOROVOD_GLOO_TIMEOUT_SECONDS", kDefaultOperationTimeoutSeconds));
}

}  // namespace hvd
