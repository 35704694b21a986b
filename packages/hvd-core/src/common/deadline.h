// deadline.h - deadlines on the steady clock, for the waits that take a
// timeout in seconds (a double, as the environment and the C ABI give it).
#pragma once

#include <algorithm>
#include <chrono>

namespace hvd {

// `seconds` from now (a negative wait is an already-passed deadline: now).
inline std::chrono::steady_clock::time_point deadline_after(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(std::max(0.0, seconds)));
}

// Seconds left until `deadline`; negative once it has passed.
inline double seconds_until(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
}

}  // namespace hvd
