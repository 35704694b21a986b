// hmac_sha256_test.cc - SHA-256 against FIPS 180-4 examples, HMAC-SHA256
// against RFC 4231, and the helpers around them.
#include <cstdio>
#include <string>

#include "auth/hmac_sha256.h"
#include "test_harness.h"

using namespace hvd;

static void check_fips_180_4_examples();

HVD_TEST(sha256_matches_fips_180_4_examples) {
  // Both implementations, where the CPU has the SHA extensions; the portable one alone elsewhere.
  for (bool extensions : {true, false}) {
    bool used = sha256_use_cpu_extensions(extensions);
    check_fips_180_4_examples();
    if (used) std::printf("  (checked with the CPU's SHA extensions too)\n");
  }
  sha256_use_cpu_extensions(true);
}

HVD_TEST(sha256_cpu_extensions_and_portable_code_agree_on_every_length) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 131 + 7));
  for (size_t n = 0; n <= data.size(); ++n) {
    sha256_use_cpu_extensions(false);
    std::string portable = to_hex(sha256(data.data(), n));
    sha256_use_cpu_extensions(true);
    EXPECT_EQ(to_hex(sha256(data.data(), n)), portable);
  }
}

static void check_fips_180_4_examples() {
  EXPECT_EQ(to_hex(sha256("", 0)), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  EXPECT_EQ(to_hex(sha256("abc", 3)), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(to_hex(sha256(two_blocks.data(), two_blocks.size())),
            std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  std::string million(1000000, 'a');
  EXPECT_EQ(to_hex(sha256(million.data(), million.size())),
            std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

HVD_TEST(hmac_sha256_matches_rfc_4231_test_cases) {
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), std::string("Hi There"))),
            std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", std::string("what do ya want for nothing?"))),
            std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  // Case 6: a key longer than the block size is hashed first.
  EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'),
                               std::string("Test Using Larger Than Block-Size Key - Hash Key First"))),
            std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

HVD_TEST(constant_time_equal_compares_content_and_length) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_TRUE(!constant_time_equal("abc", "abd"));
  EXPECT_TRUE(!constant_time_equal("abc", "abcd"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

HVD_TEST(random_hex_is_hex_of_requested_length_and_differs) {
  std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), size_t(32));
  EXPECT_TRUE(a != b);
  EXPECT_TRUE(a.find_first_not_of("0123456789abcdef") == std::string::npos);
}
