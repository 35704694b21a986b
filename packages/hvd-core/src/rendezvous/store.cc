// store.cc - what every Store shares: an interruptible get() made of short
// waits, for stores that have no better way (the HTTP store has its own).
#include "rendezvous/store.h"

#include <algorithm>

#include "common/deadline.h"
#include "common/error.h"

namespace hvd {

std::string Store::get_interruptible(const std::string& key, double timeout_seconds, const Interrupt& interrupt) {
  if (!interrupt) return get(key, timeout_seconds);
  const auto deadline = deadline_after(timeout_seconds);
  for (;;) {
    interrupt();
    const double left = seconds_until(deadline);
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
