// autotune.h - HOROVOD_AUTOTUNE: while the job trains, the coordinator of
// the global process set tries settings of the knobs it owns (fusion
// threshold, cycle time, response cache, and for a set spanning hosts
// whether allreduce and allgather run in stages, and the chunk of the
// shared-memory pipelined allreduce) and the gradient bucket size of an
// optimizer that declared one, scores each by the bytes it releases per
// second, and keeps the best. The fusion threshold and cycle time are
// searched together by Bayesian optimisation (a Gaussian process over the
// scores so far, the next point where the expected improvement is largest);
// then each on/off knob is tried the other way round the best so far, then
// smaller pipeline chunks, then other gradient bucket sizes. Every engine
// knob acts where the coordinator decides what runs or travels with its
// responses (the staging, the chunk), so all ranks always execute the same
// responses the same way. The bucket size acts in the binding, which asks
// for it between steps and hears rank 0's answer through a small allreduce
// (horovod/common/autotune.py), so every rank re-buckets after the same step.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/message.h"

namespace hvd {

struct TunedSettings {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_seconds = 0;
  bool cache_enabled = true;
  bool hierarchical_allreduce = true;
  bool hierarchical_allgather = true;
  int64_t pipeline_chunk_bytes = 0;  // 0: the transport's default chunk
  int64_t gradient_bucket_bytes = -1;  // -1: the size the optimizer was configured with
  bool operator==(const TunedSettings& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_seconds == o.cycle_time_seconds &&
           cache_enabled == o.cache_enabled && hierarchical_allreduce == o.hierarchical_allreduce &&
           hierarchical_allgather == o.hierarchical_allgather && pipeline_chunk_bytes == o.pipeline_chunk_bytes &&
           gradient_bucket_bytes == o.gradient_bucket_bytes;
  }
};

// Bounds of the search, as Horovod documents them.
constexpr double kAutotuneMaxFusionMiB = 64;
constexpr double kAutotuneMinCycleMs = 1, kAutotuneMaxCycleMs = 100;

// A Gaussian process with a squared-exponential kernel over points in
// [0,1]^2, fitted to standardised scores; expected_improvement() is the
// acquisition the search maximises.
class GaussianProcess {
 public:
  explicit GaussianProcess(double noise) : noise_(noise) {}
  void fit(const std::vector<std::array<double, 2>>& x, const std::vector<double>& y);
  // Posterior mean and standard deviation (standardised units) at `p`.
  void predict(const std::array<double, 2>& p, double* mean, double* sd) const;
  // Expected improvement over the best standardised score seen.
  double expected_improvement(const std::array<double, 2>& p) const;

 private:
  double noise_;
  std::vector<std::array<double, 2>> x_;
  std::vector<double> alpha_;           // K^-1 y
  std::vector<std::vector<double>> l_;  // Cholesky factor of K + noise I
  double best_ = 0;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  // `initial`: the settings the job started with (tried first, so the
  // result is never worse than them by more than the scores' noise).
  // `staging_switchable`: the set spans hosts with a staged (hierarchical)
  // communicator, so the hierarchical knobs mean something and are tried;
  // otherwise they are logged as they are. `pipeline_chunk_default`: the
  // set's transport cuts a pipelined allreduce into chunks of this many
  // bytes (Communicator::pipeline_chunk_default; 0: it has no such chunk),
  // and a half and a quarter of it are tried at the end.
  Autotuner(const AutotuneConfig& config, const TunedSettings& initial, bool staging_switchable,
            size_t pipeline_chunk_default = 0);

  // Every batch of responses the coordinator releases. Returns true when
  // settings() changed and must be applied.
  bool observe(const std::vector<Response>& responses, Clock::time_point now);
  const TunedSettings& settings() const { return current_; }
  // An optimizer buckets its gradients, `configured_bytes` a bucket
  // (HOROVOD_GRADIENT_BUCKET_MB), `total_bytes` of them a step: other sizes
  // are tried after the pipeline chunks. The first declaration counts; one
  // that comes after that phase began is ignored.
  void declare_gradient_bucket(int64_t configured_bytes, int64_t total_bytes);
  bool done() const { return phase_ == Phase::kDone; }
  // The settings tried so far with their scores (bytes per second).
  const std::vector<std::pair<TunedSettings, double>>& history() const { return history_; }

 private:
  // After the joint search, the on/off knobs in this order.
  enum class Phase {
    kWarmup,
    kJoint,
    kCache,
    kHierarchicalAllreduce,
    kHierarchicalAllgather,
    kPipelineChunk,
    kGradientBucket,
    kDone
  };
  void scored(double score);  // one candidate's score is in: log it, pick the next
  // Moves to the next on/off knob that may be tuned and makes the best
  // settings with that knob the other way the candidate; false when none is left.
  bool next_switch();
  TunedSettings next_joint_candidate() const;
  void log_row(const TunedSettings& s, double score);

  AutotuneConfig config_;
  bool staging_switchable_;
  std::vector<int64_t> chunk_candidates_;  // tried in order in Phase::kPipelineChunk
  size_t next_chunk_ = 0;
  bool bucket_declared_ = false;
  std::vector<int64_t> bucket_candidates_;  // tried in order in Phase::kGradientBucket
  size_t next_bucket_ = 0;
  Phase phase_ = Phase::kWarmup;
  TunedSettings current_;
  std::vector<TunedSettings> seeds_;  // the first joint candidates
  std::vector<std::pair<TunedSettings, double>> history_;
  TunedSettings best_;
  double best_score_ = -1;
  int warmups_left_;

  // The sample being measured: it ends when some tensor has been released
  // steps_per_sample more times.
  std::unordered_map<std::string, int> tensor_counts_;
  int64_t sample_bytes_ = 0;
  Clock::time_point sample_start_;
  bool sample_started_ = false;
  bool skip_next_ = false;  // the sample that straddles a change of settings
  std::vector<double> sub_scores_;  // a candidate's score: the median of a few samples

  std::ofstream log_;
};

}  // namespace hvd
