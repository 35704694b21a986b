// store.cc - what every Store shares: an interruptible get() made of short
// waits, for stores that have no better way (the HTTP store has its own).
#include "rendezvous/store.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace hvd {

std::string Store::get_interruptible(const std::string& key, double timeout_seconds, const Interrupt& interrupt) {
  if (!interrupt) return get(key, timeout_seconds);
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  for (;;) {
    interrupt();
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    try {
      return get(key, std::max(0.0, std::min(left, kInterruptSliceSeconds)));
    } catch (const Error&) {
      if (left > kInterruptSliceSeconds) continue;  // absent so far
    }
    throw_error(ErrorCode::kInternal, "rendezvous store: key '" + key + "' did not appear within " +
                                          std::to_string(timeout_seconds) + " s");
  }
}

}  // namespace hvd
