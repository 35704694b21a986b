// fuzz_seeds.cc - writes small seed corpora for the fuzz targets, made by
// the encoders themselves: <dir>/message, <dir>/control_channel and
// <dir>/http_response; and hellos for <dir>/handshake (the layout
// fuzz_handshake.cc describes). Usage: fuzz_seeds <dir> (the subdirectories
// must exist).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/message.h"

namespace {

bool write_file(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

std::string frame(hvd::MessageType type, const std::string& payload) {
  uint32_t length = static_cast<uint32_t>(payload.size() + 1);
  std::string out(reinterpret_cast<const char*>(&length), 4);
  out.push_back(static_cast<char>(type));
  return out + payload;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];

  hvd::RequestMeta a;
  a.name = "grad/dense/kernel";
  a.shape = {128, 64};
  hvd::RequestMeta b;
  b.name = "embedding";
  b.collective = hvd::Collective::kAllgather;
  b.dtype = hvd::DataType::kFloat16;
  b.shape = {3, 7};
  b.group_key = "grad/dense/kernel";
  b.group_size = 2;
  std::string requests = hvd::encode_requests({a, b});

  hvd::Response execute;
  execute.names = {"grad/dense/kernel", "grad/dense/bias"};
  execute.shapes = {{128, 64}, {64}};
  execute.first_dims = {{}, {}};
  execute.joined_ranks = {3};
  hvd::Response gather;
  gather.collective = hvd::Collective::kAllgather;
  gather.names = {"embedding"};
  gather.shapes = {{3, 7}};
  gather.first_dims = {{3, 5}};
  hvd::Response error;
  error.kind = hvd::Response::Kind::kError;
  error.names = {"x"};
  error.error_message = "mismatched shapes";
  error.error_ranks = {0, 1};
  std::string responses = hvd::encode_responses({execute, gather, error});

  std::string names = hvd::encode_names({"grad/dense/kernel", "embedding"});
  std::string failure =
      hvd::encode_failure(hvd::Error(hvd::ErrorCode::kInternal, "rank 1 exited", "embedding", {1}));

  // fuzz_message: the first byte picks the decoder (0 requests, 1 responses,
  // 2 names, 3 failure).
  bool ok = write_file(dir + "/message/requests", std::string(1, '\0') + requests) &&
            write_file(dir + "/message/responses", std::string(1, '\1') + responses) &&
            write_file(dir + "/message/names", std::string(1, '\2') + names) &&
            write_file(dir + "/message/failure", std::string(1, '\3') + failure) &&
            write_file(dir + "/message/empty_requests", std::string(1, '\0') + hvd::encode_requests({}));

  ok = ok && write_file(dir + "/control_channel/session",
                        frame(hvd::MessageType::kRequests, requests) +
                            frame(hvd::MessageType::kHeartbeat, "") +
                            frame(hvd::MessageType::kWaiting, names) +
                            frame(hvd::MessageType::kResponses, responses) +
                            frame(hvd::MessageType::kAbort, failure) + frame(hvd::MessageType::kGoodbye, ""));

  // Replies of the shape the rendezvous server (Python) sends.
  ok = ok &&
       write_file(dir + "/http_response/ok",
                  "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\n\r\nhello") &&
       write_file(dir + "/http_response/not_found",
                  "HTTP/1.0 404 Not Found\r\nServer: x\r\ncontent-length: 0\r\n\r\n") &&
       write_file(dir + "/http_response/no_length", "HTTP/1.1 403 Forbidden\r\n\r\nbad signature\n");
  // Handshakes: mode, hello length (2 bytes), hello, then the rest. A hello
  // is "HVD1" | dialer u32 | acceptor u32 | tag length u16 | nonce[16] | tag.
  auto hello = [](uint32_t dialer, uint32_t acceptor, const std::string& tag) {
    std::string h("HVD1", 4);
    for (uint32_t v : {dialer, acceptor}) {
      for (int i = 0; i < 4; ++i) h.push_back(static_cast<char>(v >> (24 - 8 * i)));
    }
    h.push_back(static_cast<char>(tag.size() >> 8));
    h.push_back(static_cast<char>(tag.size() & 0xff));
    return h + std::string(16, 'n') + tag;
  };
  auto handshake = [](uint8_t mode, const std::string& h, const std::string& rest) {
    std::string out(1, static_cast<char>(mode));
    out.push_back(static_cast<char>(h.size() >> 8));
    out.push_back(static_cast<char>(h.size() & 0xff));
    return out + h + rest;
  };
  ok = ok && write_file(dir + "/handshake/honest", handshake(1, hello(1, 0, "ps0/ctrl"), "first frame")) &&
       write_file(dir + "/handshake/wrong_proof", handshake(3, hello(3, 0, "ps0/ring"), "")) &&
       write_file(dir + "/handshake/no_secret", handshake(0, hello(1, 0, "ps0/ctrl"), std::string(32, 'p'))) &&
       write_file(dir + "/handshake/other_rank", handshake(1, hello(2, 5, "t"), ""));
  if (!ok) {
    std::perror("fuzz_seeds");
    return 1;
  }
  return 0;
}
