// http_response.h - the HTTP store client's parser of a server's reply,
// apart from the socket code so the fuzz target in tests/fuzz can drive it
// with arbitrary bytes. Internal to the engine.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

namespace hvd {
namespace http {

// A failure to talk to the store at all. `maybe_applied` is false when no
// byte of the request could have reached the server, which makes even a
// non-idempotent request (add) safe to resend.
class TransportFailure : public std::runtime_error {
 public:
  TransportFailure(const std::string& message, bool maybe_applied)
      : std::runtime_error(message), maybe_applied_(maybe_applied) {}
  bool maybe_applied() const { return maybe_applied_; }

 private:
  bool maybe_applied_;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// s without leading and trailing spaces, tabs and line ends.
std::string trim(const std::string& s);

// Parses a whole reply (status line, headers, body up to Content-Length).
// Throws TransportFailure (maybe_applied true) when it is malformed or
// shorter than its Content-Length.
HttpResponse parse_response(const std::string& raw);

}  // namespace http
}  // namespace hvd
