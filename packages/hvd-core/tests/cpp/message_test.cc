// message_test.cc - control-message decoding refuses corrupt payloads (unknown
// enum values, counts the payload cannot hold, over-long names) with an
// Error instead of misreading them or allocating for them.
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/message.h"
#include "test_harness.h"

using namespace hvd;

namespace {

RequestMeta request(const std::string& name) {
  RequestMeta m;
  m.name = name;
  m.collective = Collective::kAllreduce;
  m.dtype = DataType::kFloat32;
  m.reduce_op = HVD_OP_SUM;
  m.shape = {4, 2};
  return m;
}

// Offsets of the single-request encoding of request("t"): u32 count, then
// u32 name length, the name, then collective, dtype and device bytes and the
// i32 reduce op.
constexpr size_t kCollectiveByte = 4 + 4 + 1;
constexpr size_t kDtypeByte = kCollectiveByte + 1;
constexpr size_t kDeviceByte = kDtypeByte + 1;
constexpr size_t kReduceOp = kDeviceByte + 1;

std::string what_decode_says(const std::string& payload) {
  try {
    decode_requests(payload);
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kInternal);
    return e.what();
  }
  return "";
}

}  // namespace

HVD_TEST(requests_round_trip_through_the_encoding) {
  auto decoded = decode_requests(encode_requests({request("a"), request("bb")}));
  EXPECT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[1].name, std::string("bb"));
  EXPECT_TRUE(decoded[1].collective == Collective::kAllreduce && decoded[1].dtype == DataType::kFloat32);
  EXPECT_EQ(decoded[1].reduce_op, HVD_OP_SUM);
}

HVD_TEST(unknown_enum_values_in_a_request_are_corrupt_not_reinterpreted) {
  const std::string good = encode_requests({request("t")});
  struct Case {
    size_t offset;
    uint8_t value;
    const char* named;
  };
  for (const Case& c : {Case{kCollectiveByte, 7, "unknown collective 7"}, Case{kDtypeByte, 11, "unknown dtype 11"},
                        Case{kDeviceByte, 2, "unknown device 2"}}) {
    std::string bad = good;
    bad[c.offset] = static_cast<char>(c.value);
    std::string message = what_decode_says(bad);
    EXPECT_TRUE(message.find(c.named) != std::string::npos);
  }
  // An unknown reduce op used to become Sum silently.
  std::string bad = good;
  int32_t op = 42;
  std::memcpy(&bad[kReduceOp], &op, 4);
  EXPECT_TRUE(what_decode_says(bad).find("unknown reduce op 42") != std::string::npos);
}

HVD_TEST(a_count_the_payload_cannot_hold_is_refused_before_allocating) {
  // 900 requests in 4,000 bytes: each needs at least 47, so the count alone
  // is refused. (Checked at 4 bytes an item, it passed and 900 requests were
  // allocated before the payload ran out.)
  std::string payload(4, '\0');
  uint32_t n = 900;
  std::memcpy(&payload[0], &n, 4);
  payload += std::string(4000, '\0');
  EXPECT_TRUE(what_decode_says(payload).find("a count of 900 items, which need at least 42300 bytes") !=
              std::string::npos);
}

HVD_TEST(inline_data_round_trips_and_more_than_the_limit_is_corrupt) {
  RequestMeta m = request("t");
  m.inline_data = std::string(16, '\x7f');
  EXPECT_TRUE(decode_requests(encode_requests({m}))[0].inline_data == m.inline_data);
  EXPECT_TRUE(decode_requests(encode_requests({m}))[0] == request("t"));  // not part of the identity
  m.inline_data = std::string(kMaxInlineBytes + 1, 'x');
  EXPECT_TRUE(what_decode_says(encode_requests({m})).find("inline data of") != std::string::npos);
  Response r;
  r.names = {"t"};
  r.shapes = {{4}};
  r.first_dims = {{}};
  r.inline_result = std::string(16, '\x01');
  EXPECT_TRUE(decode_responses(encode_responses({r}))[0].inline_result == r.inline_result);
}

HVD_TEST(tensor_names_longer_than_the_limit_are_corrupt) {
  std::string long_name(kMaxTensorNameBytes + 1, 'x');
  EXPECT_TRUE(what_decode_says(encode_requests({request(long_name)})).find("tensor name of") != std::string::npos);
  std::string at_limit(kMaxTensorNameBytes, 'x');
  EXPECT_EQ(decode_requests(encode_requests({request(at_limit)}))[0].name.size(), kMaxTensorNameBytes);
}

HVD_TEST(unknown_enum_values_in_a_response_are_corrupt) {
  Response r;
  r.names = {"t"};
  r.shapes = {{4}};
  r.first_dims = {{}};
  const std::string good = encode_responses({r});
  EXPECT_EQ(decode_responses(good).size(), 1u);
  std::string bad = good;
  bad[4] = 9;  // the response kind follows the u32 count
  bool refused = false;
  try {
    decode_responses(bad);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("unknown response kind 9") != std::string::npos;
  }
  EXPECT_TRUE(refused);
}
