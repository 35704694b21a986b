// timed_choice.h - picks the fastest of two or more ways to run the same
// call by timing each, for choices whose answer changes with the machine's
// moment (on the AMD EPYC VM hvd was measured on, which of two copy paths
// won flipped from one minute to the next).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace hvd {

template <int Ways>
class TimedChoiceOf {
  static_assert(Ways >= 2);

 public:
  // Costs kept per way: the least of the last kSamples judges it (a
  // preempted call only ever looks slower, and the first calls after a
  // switch run on cold caches).
  static constexpr int kSamples = 4;

  // The way for the next call (0 .. Ways - 1). Calls go in runs of `run`
  // calls (at least kSamples) one way: a run each way first, then runs of
  // the fastest way, except for a run of another way every `retry_every`
  // runs (the others in turn): its time may have changed since. A way not
  // measured in full yet (a sample may arrive a call late) counts as the
  // fastest one.
  int next(uint64_t run, uint64_t retry_every) {
    if (left_ == 0) {
      const int best = fastest();
      if (runs_ < static_cast<uint64_t>(Ways)) {
        way_ = static_cast<int>(runs_);
      } else if ((runs_ - (Ways - 1)) % retry_every == 0) {
        way_ = (best + 1 + static_cast<int>(retries_++ % (Ways - 1))) % Ways;
      } else {
        way_ = best;
      }
      ++runs_;
      left_ = run;
    }
    --left_;
    return way_;
  }

  // What a call that went `way` cost (any unit, the same for every way;
  // lower is better, must be > 0).
  void record(int way, double cost) {
    auto& samples = cost_[static_cast<size_t>(way)];
    std::rotate(samples.begin(), samples.begin() + 1, samples.end());  // the oldest out
    samples.back() = cost;
  }

 private:
  double least(int way) const {
    const auto& samples = cost_[static_cast<size_t>(way)];
    return *std::min_element(samples.begin(), samples.end());
  }
  int fastest() const {
    int best = 0;
    for (int way = 1; way < Ways; ++way) {
      if (least(way) < least(best)) best = way;
    }
    return best;
  }

  std::array<std::array<double, kSamples>, Ways> cost_{};  // 0: no sample yet
  uint64_t runs_ = 0;     // runs begun
  uint64_t retries_ = 0;  // runs begun to retry a way other than the fastest
  uint64_t left_ = 0;     // calls left in the current run
  int way_ = 0;           // the current run's way
};

// Two ways: false (0) is the first, true (1) the second.
using TimedChoice = TimedChoiceOf<2>;

}  // namespace hvd
