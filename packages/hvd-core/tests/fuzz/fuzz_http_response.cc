// fuzz_http_response.cc - the HTTP store client's reply parser on arbitrary
// bytes: it may refuse a reply only with TransportFailure, and a parsed body
// never exceeds what followed the headers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rendezvous/http_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string raw(reinterpret_cast<const char*>(data), size);
  try {
    hvd::http::HttpResponse response = hvd::http::parse_response(raw);
    if (response.body.size() > raw.size()) std::abort();
  } catch (const hvd::http::TransportFailure&) {
  }
  return 0;
}
