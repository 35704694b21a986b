// interrupt.h - a check that long waits for peers call now and then while a
// process set is created; it throws to end the wait early. The engine's
// check: the global process set has already failed (a peer died or froze),
// so the peers being waited for may never come.
#pragma once

#include <functional>

#include "common/error.h"

namespace hvd {

// Throws Interrupted to end a wait.
using Interrupt = std::function<void()>;

// What an Interrupt throws: an Error that waits pass on as it is, never
// taking it for a failed attempt worth another try.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// How often a wait calls its Interrupt: often enough that a failure ends the
// wait promptly, seldom enough to cost nothing.
constexpr double kInterruptSliceSeconds = 0.1;

}  // namespace hvd
