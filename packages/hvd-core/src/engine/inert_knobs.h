// inert_knobs.h - Horovod's HOROVOD_* knobs that mean nothing in hvd (GPU,
// oneCCL, autotuning, ...): accepted, and each one that is set reported once
// in one line, so a script written for Horovod runs and says what it lost.
#pragma once

#include <string>
#include <vector>

namespace hvd {

// One line per knob that is set (and not set to a false value) in the
// environment, saying why it has no effect; empty when none is.
std::vector<std::string> inert_knob_notices();

}  // namespace hvd
