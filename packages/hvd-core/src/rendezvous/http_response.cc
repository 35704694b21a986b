// http_response.cc - parsing the HTTP store server's replies.
#include "rendezvous/http_response.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace hvd {
namespace http {
std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

HttpResponse parse_response(const std::string& raw) {
  size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
    throw TransportFailure("malformed HTTP response (" + std::to_string(raw.size()) + " bytes)", true);
  }
  HttpResponse response;
  size_t line_end = raw.find("\r\n");
  size_t space = raw.find(' ');
  if (space == std::string::npos || space > line_end) {
    throw TransportFailure("malformed HTTP status line", true);
  }
  response.status = std::atoi(raw.c_str() + space + 1);
  size_t pos = line_end + 2;
  while (pos < header_end) {
    size_t next = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, next - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      response.headers[name] = trim(line.substr(colon + 1));
    }
    pos = next + 2;
  }
  response.body = raw.substr(header_end + 4);
  auto length = response.headers.find("content-length");
  if (length != response.headers.end()) {
    size_t expected = static_cast<size_t>(std::strtoull(length->second.c_str(), nullptr, 10));
    if (response.body.size() < expected) throw TransportFailure("truncated HTTP response", true);
    response.body.resize(expected);
  }
  return response;
}

}  // namespace http
}  // namespace hvd
