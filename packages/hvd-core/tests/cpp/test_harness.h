// test_harness.h - a minimal self-contained test runner: HVD_TEST registers
// a case, EXPECT_* record failures, run_members() runs one body per member
// as threads and re-raises the first failure in the calling thread.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hvd_test {

struct TestFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TestCase {
  std::string name;
  std::function<void()> body;
};

std::vector<TestCase>& registry();

struct Registrar {
  Registrar(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::ostringstream s;
  s << file << ":" << line << ": " << what;
  throw TestFailure(s.str());
}

// Runs body(member) on `members` threads; rethrows the first exception.
inline void run_members(int members, const std::function<void(int)>& body) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      try {
        body(m);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace hvd_test

#define HVD_TEST_CONCAT_(a, b) a##b
#define HVD_TEST(name)                                                          \
  static void name();                                                          \
  static ::hvd_test::Registrar HVD_TEST_CONCAT_(name, _registrar)(#name, name); \
  static void name()

#define EXPECT_TRUE(cond)                                            \
  do {                                                               \
    if (!(cond)) ::hvd_test::fail(__FILE__, __LINE__, "expected " #cond); \
  } while (0)

#define EXPECT_EQ(a, b)                                                               \
  do {                                                                                \
    auto hvd_a_ = (a);                                                                \
    auto hvd_b_ = (b);                                                                \
    if (!(hvd_a_ == hvd_b_)) {                                                        \
      std::ostringstream hvd_s_;                                                      \
      hvd_s_ << "expected " #a " == " #b ", got " << hvd_a_ << " vs " << hvd_b_;       \
      ::hvd_test::fail(__FILE__, __LINE__, hvd_s_.str());                             \
    }                                                                                 \
  } while (0)

// Runs `stmt` and expects hvd::Error with the given code.
#define EXPECT_THROWS_CODE(stmt, error_code)                                              \
  do {                                                                                    \
    bool hvd_threw_ = false;                                                              \
    try {                                                                                 \
      stmt;                                                                               \
    } catch (const ::hvd::Error& hvd_e_) {                                                \
      hvd_threw_ = true;                                                                  \
      if (hvd_e_.code() != (error_code)) {                                                \
        ::hvd_test::fail(__FILE__, __LINE__, std::string("wrong error code: ") + hvd_e_.what()); \
      }                                                                                   \
    }                                                                                     \
    if (!hvd_threw_) ::hvd_test::fail(__FILE__, __LINE__, "expected " #stmt " to throw"); \
  } while (0)
