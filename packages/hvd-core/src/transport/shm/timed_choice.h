// timed_choice.h - picks the faster of two ways to run the same call by
// timing both, for choices whose answer changes with the machine's moment
// (on the AMD EPYC VM hvd is measured on, which of two copy paths wins
// flips from one minute to the next).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace hvd {

class TimedChoice {
 public:
  // Costs kept per way: the least of the last kSamples judges it (a
  // preempted call only ever looks slower, and the first calls after a
  // switch run on cold caches).
  static constexpr int kSamples = 4;

  // The way for the next call (false: the first way, true: the second).
  // Calls go in runs of `run` calls (at least kSamples) one way: a run each
  // way first, then runs of the faster way, except for a run of the slower
  // way every `retry_every` runs: its time may have changed since. A way
  // not measured in full yet (a sample may arrive a call late) counts as
  // the faster one.
  bool next(uint64_t run, uint64_t retry_every) {
    if (left_ == 0) {
      const bool second_faster = least(true) < least(false);
      way_ = runs_ < 2 ? runs_ == 1 : (runs_ - 1) % retry_every == 0 ? !second_faster : second_faster;
      ++runs_;
      left_ = run;
    }
    --left_;
    return way_;
  }

  // What a call that went `way` cost (any unit, the same for both ways;
  // lower is better, must be > 0).
  void record(bool way, double cost) {
    auto& samples = cost_[way];
    std::rotate(samples.begin(), samples.begin() + 1, samples.end());  // the oldest out
    samples.back() = cost;
  }

 private:
  double least(bool way) const { return *std::min_element(cost_[way].begin(), cost_[way].end()); }

  std::array<std::array<double, kSamples>, 2> cost_{};  // 0: no sample yet
  uint64_t runs_ = 0;  // runs begun
  uint64_t left_ = 0;  // calls left in the current run
  bool way_ = false;   // the current run's way
};

}  // namespace hvd
