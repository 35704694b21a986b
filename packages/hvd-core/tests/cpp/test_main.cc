// test_main.cc - runs every registered test (or those whose name contains
// argv[1]) and prints "N passed, N failed"; the exit status is the verdict.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "test_harness.h"

namespace hvd_test {
std::vector<TestCase>& registry() {
  static std::vector<TestCase> cases;
  return cases;
}
}  // namespace hvd_test

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : "";
  int passed = 0, failed = 0;
  for (auto& test : hvd_test::registry()) {
    if (std::strstr(test.name.c_str(), filter) == nullptr) continue;
    auto start = std::chrono::steady_clock::now();
    try {
      test.body();
      ++passed;
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("[ OK ] %s (%.2f s)\n", test.name.c_str(), s);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("[FAIL] %s: %s\n", test.name.c_str(), e.what());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
