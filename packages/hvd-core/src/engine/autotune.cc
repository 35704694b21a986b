// autotune.cc - see autotune.h.
#include "engine/autotune.h"

#include <algorithm>
#include <cmath>

#include "common/dtype.h"
#include "common/logging.h"

namespace hvd {
namespace {

constexpr double kLengthScale = 0.25;  // of the kernel, in the unit square
constexpr double kExploration = 0.01;  // expected improvement's margin, standardised units
constexpr size_t kSamplesPerCandidate = 3;  // a candidate's score is their median
constexpr int kCandidatePoints = 256;  // where the acquisition is evaluated

double kernel(const std::array<double, 2>& a, const std::array<double, 2>& b) {
  double dx = a[0] - b[0], dy = a[1] - b[1];
  return std::exp(-(dx * dx + dy * dy) / (2 * kLengthScale * kLengthScale));
}

// The i-th point of the Halton sequence in `base` (low discrepancy: the
// candidates cover the square evenly, and the search is reproducible).
double halton(int i, int base) {
  double f = 1, r = 0;
  for (; i > 0; i /= base) {
    f /= base;
    r += f * (i % base);
  }
  return r;
}

std::array<double, 2> to_unit(const TunedSettings& s) {
  double mib = static_cast<double>(s.fusion_threshold_bytes) / (1024.0 * 1024.0);
  double ms = s.cycle_time_seconds * 1000.0;
  return {std::clamp(mib / kAutotuneMaxFusionMiB, 0.0, 1.0),
          std::clamp((ms - kAutotuneMinCycleMs) / (kAutotuneMaxCycleMs - kAutotuneMinCycleMs), 0.0, 1.0)};
}

// `p` for the fusion threshold and cycle time; the on/off knobs from `base`.
TunedSettings from_unit(const std::array<double, 2>& p, const TunedSettings& base) {
  TunedSettings s = base;
  s.fusion_threshold_bytes = static_cast<int64_t>(std::llround(p[0] * kAutotuneMaxFusionMiB * 1024 * 1024));
  s.cycle_time_seconds = (kAutotuneMinCycleMs + p[1] * (kAutotuneMaxCycleMs - kAutotuneMinCycleMs)) / 1000.0;
  return s;
}

int64_t executed_bytes(const std::vector<Response>& responses) {
  int64_t total = 0;
  for (const auto& r : responses) {
    if (r.kind == Response::Kind::kExecute) total += response_bytes(r);
  }
  return total;
}

}  // namespace

void GaussianProcess::fit(const std::vector<std::array<double, 2>>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  x_ = x;
  l_.assign(n, std::vector<double>(n, 0.0));
  // Cholesky factor of K + noise I (positive definite: noise > 0).
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = kernel(x[i], x[j]) + (i == j ? std::max(noise_, 1e-6) : 0.0);
      for (size_t k = 0; k < j; ++k) sum -= l_[i][k] * l_[j][k];
      l_[i][j] = i == j ? std::sqrt(std::max(sum, 1e-12)) : sum / l_[j][j];
    }
  }
  // alpha = K^-1 y: forward, then backward substitution.
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    double sum = y[i];
    for (size_t k = 0; k < i; ++k) sum -= l_[i][k] * z[k];
    z[i] = sum / l_[i][i];
  }
  alpha_.assign(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double sum = z[i];
    for (size_t k = i + 1; k < n; ++k) sum -= l_[k][i] * alpha_[k];
    alpha_[i] = sum / l_[i][i];
  }
  best_ = y.empty() ? 0 : *std::max_element(y.begin(), y.end());
}

void GaussianProcess::predict(const std::array<double, 2>& p, double* mean, double* sd) const {
  const size_t n = x_.size();
  std::vector<double> k(n), v(n);
  *mean = 0;
  for (size_t i = 0; i < n; ++i) {
    k[i] = kernel(p, x_[i]);
    *mean += k[i] * alpha_[i];
  }
  double var = 1.0;
  for (size_t i = 0; i < n; ++i) {
    double sum = k[i];
    for (size_t j = 0; j < i; ++j) sum -= l_[i][j] * v[j];
    v[i] = sum / l_[i][i];
    var -= v[i] * v[i];
  }
  *sd = std::sqrt(std::max(var, 1e-12));
}

double GaussianProcess::expected_improvement(const std::array<double, 2>& p) const {
  double mean, sd;
  predict(p, &mean, &sd);
  double gain = mean - best_ - kExploration;
  double z = gain / sd;
  double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return gain * cdf + sd * pdf;
}

// A chunk smaller than this costs more in barriers than it can win in cache.
constexpr size_t kMinTunedChunkBytes = 32 * 1024;
// Buckets smaller than this pay a negotiation for too little data.
constexpr int64_t kMinTunedBucketBytes = 256 * 1024;

std::string describe_bucket(int64_t bytes) {
  return bytes < 0 ? std::string("as configured") : std::to_string(bytes) + " bytes";
}

Autotuner::Autotuner(const AutotuneConfig& config, const TunedSettings& initial, bool staging_switchable,
                     size_t pipeline_chunk_default)
    : config_(config),
      staging_switchable_(staging_switchable),
      current_(initial),
      best_(initial),
      warmups_left_(std::max(0, config.warmup_samples)) {
  for (size_t chunk : {pipeline_chunk_default / 2, pipeline_chunk_default / 4}) {
    if (chunk >= kMinTunedChunkBytes) chunk_candidates_.push_back(static_cast<int64_t>(chunk));
  }
  config_.steps_per_sample = std::max(1, config_.steps_per_sample);
  config_.max_samples = std::max(1, config_.max_samples);
  // The job's own settings first (as they are, even outside the searched
  // bounds, so the defaults are always a candidate), then a spread over the
  // square; the Gaussian process takes over from there.
  seeds_.push_back(initial);
  for (auto p : {std::array<double, 2>{0.125, 0.0}, {0.5, 0.1}, {0.03, 0.0}, {1.0, 0.3}}) {
    seeds_.push_back(from_unit(p, initial));
  }
  if (!config_.tune_fusion_and_cycle) {
    seeds_ = {initial};
    config_.max_samples = 1;  // score the job's settings, the baseline for the cache
  }
  current_ = seeds_[0];
  if (!config_.log_path.empty()) {
    log_.open(config_.log_path, std::ios::out | std::ios::trunc);
    if (!log_) {
      HVD_LOG(kWarning, "HOROVOD_AUTOTUNE_LOG: cannot write " << config_.log_path << "; tuning without a log");
    } else {
      log_ << "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
              "tensor_fusion_threshold,score\n";
      log_.flush();
    }
  }
  if (warmups_left_ == 0) phase_ = Phase::kJoint;
  HVD_LOG(kInfo, "autotune: searching fusion threshold 0-64 MiB and cycle time 1-100 ms ("
                     << config_.max_samples << " settings), then the response cache"
                     << (staging_switchable_ ? " and hierarchical allreduce and allgather" : "")
                     << (chunk_candidates_.empty() ? "" : ", then smaller pipeline chunks") << "; "
                     << config_.steps_per_sample << " steps per sample");
}

void Autotuner::declare_gradient_bucket(int64_t configured_bytes, int64_t total_bytes) {
  if (bucket_declared_ || phase_ >= Phase::kGradientBucket) return;
  bucket_declared_ = true;
  // A quarter and a sixteenth of the configured size (more overlap with
  // backward, more collectives), and four times it (fewer); a size that
  // would cut the gradients the same way as one already listed is left out
  // (every size from total_bytes up makes one bucket).
  auto cut = [&](int64_t bytes) { return std::min(bytes, total_bytes); };
  std::vector<int64_t> cuts{cut(configured_bytes)};
  for (int64_t bytes : {configured_bytes / 4, configured_bytes / 16, configured_bytes * 4}) {
    if (configured_bytes <= 0 || bytes < kMinTunedBucketBytes) continue;
    if (std::find(cuts.begin(), cuts.end(), cut(bytes)) != cuts.end()) continue;
    cuts.push_back(cut(bytes));
    bucket_candidates_.push_back(bytes);
  }
  HVD_LOG(kInfo, "autotune: the optimizer buckets " << total_bytes << " bytes of gradients in buckets of "
                     << configured_bytes << " bytes; " << bucket_candidates_.size()
                     << " other bucket sizes are tried last");
}

void Autotuner::log_row(const TunedSettings& s, double score) {
  if (!log_) return;
  log_ << (s.hierarchical_allreduce ? 1 : 0) << "," << (s.hierarchical_allgather ? 1 : 0) << ",0,"
       << (s.cache_enabled ? 1 : 0) << "," << s.cycle_time_seconds * 1000.0 << ","
       << static_cast<double>(s.fusion_threshold_bytes) / (1024.0 * 1024.0) << "," << score << "\n";
  log_.flush();
}

bool Autotuner::observe(const std::vector<Response>& responses, Clock::time_point now) {
  if (phase_ == Phase::kDone || responses.empty()) return false;
  if (!sample_started_) {
    sample_started_ = true;
    sample_start_ = now;
  }
  bool sample_complete = false;
  for (const auto& r : responses) {
    for (const auto& name : r.names) {
      if (++tensor_counts_[name] >= config_.steps_per_sample) sample_complete = true;
    }
  }
  sample_bytes_ += executed_bytes(responses);
  if (!sample_complete) return false;
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  const double score = static_cast<double>(sample_bytes_) / std::max(seconds, 1e-9) / 1e6;  // bytes per us
  tensor_counts_.clear();
  sample_bytes_ = 0;
  sample_start_ = now;
  if (skip_next_) {
    skip_next_ = false;
    return false;
  }
  if (phase_ == Phase::kWarmup) {
    if (--warmups_left_ <= 0) phase_ = Phase::kJoint;
    return false;
  }
  sub_scores_.push_back(score);
  if (sub_scores_.size() < kSamplesPerCandidate) return false;
  std::sort(sub_scores_.begin(), sub_scores_.end());
  const double median = sub_scores_[sub_scores_.size() / 2];
  sub_scores_.clear();
  const TunedSettings before = current_;
  scored(median);
  const bool changed = !(before == current_);
  skip_next_ = changed;
  return changed;
}

void Autotuner::scored(double score) {
  history_.emplace_back(current_, score);
  log_row(current_, score);
  if (score > best_score_) {
    best_score_ = score;
    best_ = current_;
  }
  if (phase_ == Phase::kJoint) {
    const size_t tried = history_.size();
    if (tried < static_cast<size_t>(config_.max_samples)) {
      current_ = tried < seeds_.size() ? seeds_[tried] : next_joint_candidate();
      return;
    }
  }
  if (next_switch()) return;
  // The search is over (every on/off knob was tried the other way): keep the best.
  phase_ = Phase::kDone;
  current_ = best_;
  log_row(best_, best_score_);
  HVD_LOG(kInfo, "autotune: done; fusion threshold "
                     << best_.fusion_threshold_bytes << " bytes, cycle time " << best_.cycle_time_seconds * 1000.0
                     << " ms, cache " << (best_.cache_enabled ? "on" : "off") << ", hierarchical allreduce "
                     << (best_.hierarchical_allreduce ? "on" : "off") << ", hierarchical allgather "
                     << (best_.hierarchical_allgather ? "on" : "off") << ", pipeline chunk "
                     << (best_.pipeline_chunk_bytes == 0 ? std::string("default")
                                                         : std::to_string(best_.pipeline_chunk_bytes) + " bytes")
                     << ", gradient bucket " << describe_bucket(best_.gradient_bucket_bytes) << " ("
                     << best_score_ << " bytes/us)");
}

bool Autotuner::next_switch() {
  while (phase_ != Phase::kDone) {
    // The chunk and bucket phases try their candidates one after the
    // other, each with the best settings so far.
    if (phase_ == Phase::kPipelineChunk && next_chunk_ < chunk_candidates_.size()) {
      current_ = best_;
      current_.pipeline_chunk_bytes = chunk_candidates_[next_chunk_++];
      HVD_LOG(kInfo, "autotune: trying a pipeline chunk of " << current_.pipeline_chunk_bytes << " bytes");
      return true;
    }
    if (phase_ == Phase::kGradientBucket && next_bucket_ < bucket_candidates_.size()) {
      current_ = best_;
      current_.gradient_bucket_bytes = bucket_candidates_[next_bucket_++];
      HVD_LOG(kInfo, "autotune: trying a gradient bucket of " << current_.gradient_bucket_bytes << " bytes");
      return true;
    }
    phase_ = phase_ == Phase::kJoint                    ? Phase::kCache
             : phase_ == Phase::kCache                  ? Phase::kHierarchicalAllreduce
             : phase_ == Phase::kHierarchicalAllreduce  ? Phase::kHierarchicalAllgather
             : phase_ == Phase::kHierarchicalAllgather  ? Phase::kPipelineChunk
             : phase_ == Phase::kPipelineChunk          ? Phase::kGradientBucket
                                                        : Phase::kDone;
    current_ = best_;
    if (phase_ == Phase::kCache && config_.tune_cache) {
      current_.cache_enabled = !best_.cache_enabled;
      return true;
    }
    if (phase_ == Phase::kHierarchicalAllreduce && staging_switchable_ && config_.tune_hierarchical_allreduce) {
      current_.hierarchical_allreduce = !best_.hierarchical_allreduce;
      return true;
    }
    if (phase_ == Phase::kHierarchicalAllgather && staging_switchable_ && config_.tune_hierarchical_allgather) {
      current_.hierarchical_allgather = !best_.hierarchical_allgather;
      return true;
    }
  }
  return false;
}

TunedSettings Autotuner::next_joint_candidate() const {
  std::vector<std::array<double, 2>> x;
  std::vector<double> y;
  for (const auto& [s, score] : history_) {
    x.push_back(to_unit(s));
    y.push_back(score);
  }
  double mean = 0, var = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  for (double v : y) var += (v - mean) * (v - mean);
  double sd = std::sqrt(var / static_cast<double>(y.size()));
  if (sd < 1e-12) sd = 1;
  for (double& v : y) v = (v - mean) / sd;
  GaussianProcess gp(config_.noise);
  gp.fit(x, y);
  std::array<double, 2> best_point = to_unit(best_);
  double best_gain = -1;
  for (int i = 1; i <= kCandidatePoints; ++i) {
    std::array<double, 2> p{halton(i, 2), halton(i, 3)};
    double gain = gp.expected_improvement(p);
    if (gain > best_gain) {
      best_gain = gain;
      best_point = p;
    }
  }
  return from_unit(best_point, current_);
}

}  // namespace hvd
