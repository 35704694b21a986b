// http_store_client_test.cc - drives the engine's HTTP store client
// (make_http_store) against a live store started by test_rendezvous.py.
// Usage: http_store_client_test HOST PORT SECRET SCENARIO
//   roundtrip       set/get/add/long-poll/timeout/concurrent adds, plus keys
//                   exchanged with the Python client (py/from-python, cpp/from-cpp)
//   wrong-secret    every request must be rejected by the store (401)
//   unreachable     nothing listens at HOST:PORT: get must fail clearly
//   unsigned-server the responder does not hold the secret: must be detected
//   oversized-response the responder sends more than a store answer can be
// Prints "PASS <check>" per check; exits 0 only when every check passed.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& name, const std::string& detail = "") {
  if (ok) {
    std::cout << "PASS " << name << std::endl;
  } else {
    std::cout << "FAIL " << name << (detail.empty() ? "" : ": " + detail) << std::endl;
    ++failures;
  }
}

// Runs `op`, expecting an hvd::Error(kInternal) whose message contains every
// string in `needles`, and prints the message so the log shows what users see.
void expect_internal_error(const std::string& name, const std::function<void()>& op,
                           const std::vector<std::string>& needles) {
  try {
    op();
    check(false, name, "no error was raised");
  } catch (const hvd::Error& e) {
    std::string message = e.what();
    bool ok = e.code() == hvd::ErrorCode::kInternal;
    for (const auto& needle : needles) ok = ok && message.find(needle) != std::string::npos;
    check(ok, name, "code " + std::to_string(static_cast<int>(e.code())) + ", message: " + message);
    std::cout << "  message: " << message << std::endl;
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_roundtrip(hvd::Store& store, const std::string& address) {
  std::string binary_value("line1\nline2 \x01\x00\xff end", 19);
  store.set("cpp/key with spaces/and:symbols", binary_value);
  check(store.get("cpp/key with spaces/and:symbols", 5) == binary_value, "set_then_get_returns_value");

  store.set("cpp/key with spaces/and:symbols", "replaced");
  check(store.get("cpp/key with spaces/and:symbols", 5) == "replaced", "set_replaces_value");

  check(store.add("cpp/counter", 5) == 5, "add_to_absent_key_starts_at_zero");
  check(store.add("cpp/counter", -2) == 3, "add_returns_new_value");
  check(store.get("cpp/counter", 5) == "3", "counter_reads_as_decimal");

  auto start = std::chrono::steady_clock::now();
  std::thread late_writer([&store] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    store.set("cpp/late", "arrived");
  });
  std::string late = store.get("cpp/late", 10);
  double waited = seconds_since(start);
  late_writer.join();
  check(late == "arrived" && waited >= 0.4 && waited < 5, "get_waits_for_a_later_set",
        "waited " + std::to_string(waited) + " s");

  start = std::chrono::steady_clock::now();
  expect_internal_error("get_of_missing_key_times_out_naming_key_store_and_timeout",
                        [&store] { store.get("cpp/never-set", 0.5); },
                        {"cpp/never-set", address, "0.500"});
  double timed_out_after = seconds_since(start);
  check(timed_out_after >= 0.45 && timed_out_after < 3, "timeout_is_honoured",
        "took " + std::to_string(timed_out_after) + " s");

  constexpr int kThreads = 4, kAddsPerThread = 25;
  std::vector<std::thread> adders;
  for (int t = 0; t < kThreads; ++t) {
    adders.emplace_back([&store] {
      for (int i = 0; i < kAddsPerThread; ++i) store.add("cpp/concurrent", 1);
    });
  }
  for (auto& t : adders) t.join();
  check(store.get("cpp/concurrent", 5) == std::to_string(kThreads * kAddsPerThread),
        "concurrent_adds_are_atomic");

  // Interoperability with the Python client: the test set this key before
  // starting us and reads ours afterwards.
  check(store.get("py/from-python", 5) == "hello from python", "reads_key_set_by_python_client");
  store.set("cpp/from-cpp", "hello from c++");

  hvd::PrefixStore prefixed(store, "job1/");
  prefixed.set("x", "1");
  check(store.get("job1/x", 5) == "1", "prefix_store_prefixes_keys");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: " << argv[0] << " HOST PORT SECRET SCENARIO" << std::endl;
    return 2;
  }
  std::string host = argv[1];
  int port = std::atoi(argv[2]);
  std::string secret = argv[3];
  std::string scenario = argv[4];
  std::string address = host + ":" + std::to_string(port);
  try {
    auto store = hvd::make_http_store(host, port, secret);
    if (scenario == "roundtrip") {
      run_roundtrip(*store, address);
    } else if (scenario == "wrong-secret") {
      expect_internal_error("set_with_wrong_secret_is_rejected",
                            [&store] { store->set("cpp/forged", "x"); }, {"rejected", address});
      expect_internal_error("get_with_wrong_secret_is_rejected",
                            [&store] { store->get("py/from-python", 1); }, {"rejected"});
      expect_internal_error("add_with_wrong_secret_is_rejected",
                            [&store] { store->add("cpp/forged-counter", 1); }, {"rejected"});
    } else if (scenario == "unreachable") {
      auto start = std::chrono::steady_clock::now();
      expect_internal_error("get_from_unreachable_store_fails_naming_store",
                            [&store] { store->get("cpp/anything", 1.0); },
                            {"cannot reach", address});
      check(seconds_since(start) < 5, "unreachable_store_fails_within_timeout");
    } else if (scenario == "oversized-response") {
      // The responder streams more than any store answer can hold: the
      // client stops reading at the cap instead of buffering it all.
      expect_internal_error("oversized_response_is_refused",
                            [&store] { store->get("cpp/anything", 1.0); },
                            {"exceeds", "not an answer of the rendezvous store"});
    } else if (scenario == "unsigned-server") {
      expect_internal_error("unsigned_response_is_detected",
                            [&store] { store->get("cpp/anything", 1.0); },
                            {"not signed with the job secret", address});
    } else {
      std::cerr << "unknown scenario " << scenario << std::endl;
      return 2;
    }
  } catch (const std::exception& e) {
    std::cout << "FAIL unexpected exception: " << e.what() << std::endl;
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
