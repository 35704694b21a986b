// autotune_test.cc - HOROVOD_AUTOTUNE's search, driven by a synthetic job
// whose throughput depends on the settings: it ends at least as good as the
// starting settings and close to the best, stays inside the documented
// bounds, keeps knobs the user set, and logs Horovod's CSV columns.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "engine/autotune.h"
#include "test_harness.h"

using namespace hvd;

namespace {

// Bytes per microsecond of a made-up job: best at 24 MiB and 3 ms, a little
// better with the cache on, with staged allreduces and with flat allgathers.
double job_throughput(const TunedSettings& s) {
  double mib = static_cast<double>(s.fusion_threshold_bytes) / (1 << 20);
  double ms = s.cycle_time_seconds * 1000;
  double score = 100 - 30 * std::pow((mib - 24) / 24, 2) - 50 * std::pow((ms - 3) / 50, 2);
  return std::max(score, 1.0) * (s.cache_enabled ? 1.0 : 0.95) * (s.hierarchical_allreduce ? 1.0 : 0.9) *
         (s.hierarchical_allgather ? 0.96 : 1.0);
}

// Runs steps of two 4 MiB tensors until the tuner is done (or `max_steps`);
// time advances as the current settings' throughput says.
Autotuner run_job(const AutotuneConfig& config, const TunedSettings& initial, int max_steps = 100000,
                  bool staging_switchable = false) {
  Autotuner tuner(config, initial, staging_switchable);
  Response r;
  r.names = {"grad.a", "grad.b"};
  r.dtype = DataType::kFloat32;
  r.shapes = {{1 << 20}, {1 << 20}};
  const double step_bytes = 8.0 * (1 << 20);
  auto now = Autotuner::Clock::now();
  for (int step = 0; step < max_steps && !tuner.done(); ++step) {
    now += std::chrono::nanoseconds(static_cast<int64_t>(step_bytes / job_throughput(tuner.settings()) * 1000));
    tuner.observe({r}, now);
  }
  return tuner;
}

std::string temp_log_path() { return "/tmp/hvd_autotune_test_" + std::to_string(getpid()) + ".csv"; }

// An enabled tuner's config: `steps` steps a sample, `warmups` samples
// ignored, `settings` settings of the joint search.
AutotuneConfig tuning(int steps, int warmups, int settings) {
  AutotuneConfig config;
  config.enabled = true;
  config.steps_per_sample = steps;
  config.warmup_samples = warmups;
  config.max_samples = settings;
  return config;
}

}  // namespace

HVD_TEST(gaussian_process_follows_its_samples_and_is_unsure_far_from_them) {
  GaussianProcess gp(1e-4);
  gp.fit({{0.1, 0.1}, {0.5, 0.5}, {0.9, 0.2}}, {-1.0, 1.5, 0.2});
  double mean, sd;
  gp.predict({0.5, 0.5}, &mean, &sd);
  EXPECT_TRUE(std::fabs(mean - 1.5) < 0.05);
  EXPECT_TRUE(sd < 0.05);
  double far_mean, far_sd;
  gp.predict({0.1, 0.95}, &far_mean, &far_sd);
  EXPECT_TRUE(far_sd > 0.5);
  // Improvement is expected next to the best sample, not next to the worst.
  EXPECT_TRUE(gp.expected_improvement({0.55, 0.5}) > gp.expected_improvement({0.1, 0.1}));
}

HVD_TEST(autotune_ends_near_the_best_settings_and_never_worse_than_the_start) {
  AutotuneConfig config = tuning(2, 2, 20);
  config.log_path = temp_log_path();
  // hvd's defaults, tried first as they are; the hierarchical knobs (not
  // tuned on one host) as the job set them, logged in every row.
  TunedSettings initial{128ll << 20, 0.001, true, true, false};
  Autotuner tuner = run_job(config, initial);
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.history().size(), 21u);  // 20 joint settings, then the cache the other way
  double start_score = tuner.history().front().second;
  const TunedSettings& best = tuner.settings();
  EXPECT_TRUE(job_throughput(best) >= start_score * 0.999);
  EXPECT_TRUE(job_throughput(best) >= 0.97 * 100);  // the optimum is 100
  EXPECT_TRUE(best.cache_enabled);
  if (std::getenv("HVD_TEST_VERBOSE")) for (const auto& [s, score] : tuner.history()) std::printf("%.2f MiB %.2f ms cache %d -> %.2f\n", s.fusion_threshold_bytes / 1048576.0, s.cycle_time_seconds * 1000, s.cache_enabled, score);
  EXPECT_EQ(tuner.history().front().first.fusion_threshold_bytes, 128ll << 20);
  for (size_t i = 1; i < tuner.history().size(); ++i) {
    const auto& [s, score] = tuner.history()[i];
    EXPECT_TRUE(s.fusion_threshold_bytes >= 0 && s.fusion_threshold_bytes <= (64ll << 20));
    EXPECT_TRUE(s.cycle_time_seconds >= 0.001 - 1e-12 && s.cycle_time_seconds <= 0.1 + 1e-12);
    EXPECT_TRUE(std::fabs(score - job_throughput(s)) < 0.01 * job_throughput(s));  // scored what ran
  }
  std::ifstream log(config.log_path);
  std::string header, line;
  std::getline(log, header);
  EXPECT_EQ(header, std::string("hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,"
                                "cycle_time_ms,tensor_fusion_threshold,score"));
  int rows = 0;
  while (std::getline(log, line)) {
    ++rows;
    EXPECT_TRUE(line.rfind("1,0,0,", 0) == 0);
  }
  EXPECT_EQ(rows, 22);  // every sample, then the best
  std::remove(config.log_path.c_str());
}

HVD_TEST(autotune_leaves_fusion_and_cycle_time_alone_when_the_user_set_them) {
  AutotuneConfig config = tuning(1, 0, AutotuneConfig{}.max_samples);
  config.tune_fusion_and_cycle = false;
  TunedSettings initial{8ll << 20, 0.005, true};
  Autotuner tuner = run_job(config, initial);
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.history().size(), 2u);  // the job's settings, then with the cache off
  for (const auto& [s, score] : tuner.history()) {
    EXPECT_EQ(s.fusion_threshold_bytes, 8ll << 20);
    EXPECT_TRUE(s.cycle_time_seconds == 0.005);
  }
  EXPECT_TRUE(tuner.settings().cache_enabled);
}

HVD_TEST(autotune_tries_each_hierarchical_knob_the_other_way_where_the_set_spans_hosts) {
  AutotuneConfig config = tuning(1, 0, 4);
  config.log_path = temp_log_path();
  TunedSettings initial{128ll << 20, 0.001, true, true, true};
  Autotuner tuner = run_job(config, initial, 100000, true);
  EXPECT_TRUE(tuner.done());
  // 4 joint settings, the cache, hierarchical allreduce, then allgather the other way.
  EXPECT_EQ(tuner.history().size(), 7u);
  const auto& history = tuner.history();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(history[i].first.hierarchical_allreduce && history[i].first.hierarchical_allgather);
  }
  EXPECT_TRUE(!history[5].first.hierarchical_allreduce && history[5].first.hierarchical_allgather);
  EXPECT_TRUE(history[6].first.hierarchical_allreduce && !history[6].first.hierarchical_allgather);
  // Each flip went around the best so far: the made-up job prefers staged
  // allreduces and flat allgathers, and the tuner ends there.
  EXPECT_TRUE(tuner.settings().hierarchical_allreduce);
  EXPECT_TRUE(!tuner.settings().hierarchical_allgather);
  std::ifstream log(config.log_path);
  std::string line, last;
  std::getline(log, line);  // header
  int rows = 0;
  while (std::getline(log, line)) {
    ++rows;
    last = line;
  }
  EXPECT_EQ(rows, 8);  // every sample, then the best
  EXPECT_TRUE(last.rfind("1,0,0,", 0) == 0);  // the best: staged allreduce, flat allgather
  std::remove(config.log_path.c_str());
}

HVD_TEST(autotune_leaves_the_hierarchical_knobs_alone_when_set_or_meaningless) {
  AutotuneConfig config = tuning(1, 0, 2);
  config.tune_hierarchical_allreduce = false;  // HOROVOD_HIERARCHICAL_ALLREDUCE was set
  TunedSettings initial{128ll << 20, 0.001, true, false, true};
  Autotuner tuner = run_job(config, initial, 100000, true);
  EXPECT_EQ(tuner.history().size(), 4u);  // 2 joint settings, the cache, allgather
  for (const auto& [s, score] : tuner.history()) EXPECT_TRUE(!s.hierarchical_allreduce);
  EXPECT_TRUE(!tuner.history().back().first.hierarchical_allgather);
  // One host (no staged communicator): neither is tried.
  config.tune_hierarchical_allreduce = true;
  Autotuner one_host = run_job(config, initial, 100000, false);
  EXPECT_EQ(one_host.history().size(), 3u);
  for (const auto& [s, score] : one_host.history()) EXPECT_TRUE(!s.hierarchical_allreduce && s.hierarchical_allgather);
}

// Runs a job of one 4 MiB tensor per step whose throughput depends on the
// pipeline chunk alone (fastest at 64 KiB, slowest at the default), under a
// transport whose default chunk is `chunk_default` bytes.
Autotuner run_chunk_job(const AutotuneConfig& config, size_t chunk_default) {
  TunedSettings initial{128ll << 20, 0.001, true, true, true};
  Autotuner tuner(config, initial, false, chunk_default);
  Response r;
  r.names = {"grad"};
  r.dtype = DataType::kFloat32;
  r.shapes = {{1 << 20}};
  auto throughput = [](const TunedSettings& s) {
    return s.pipeline_chunk_bytes == 64 * 1024 ? 120.0 : s.pipeline_chunk_bytes == 128 * 1024 ? 110.0 : 100.0;
  };
  auto now = Autotuner::Clock::now();
  for (int step = 0; step < 100000 && !tuner.done(); ++step) {
    now += std::chrono::nanoseconds(static_cast<int64_t>(4.0 * (1 << 20) / throughput(tuner.settings()) * 1000));
    tuner.observe({r}, now);
  }
  return tuner;
}

HVD_TEST(autotune_tries_a_half_and_a_quarter_pipeline_chunk_last_and_keeps_the_best) {
  AutotuneConfig config = tuning(1, 0, 2);
  config.log_path = temp_log_path();
  Autotuner tuner = run_chunk_job(config, 256 * 1024);
  EXPECT_TRUE(tuner.done());
  const auto& history = tuner.history();
  EXPECT_EQ(history.size(), 5u);  // 2 joint settings, the cache, then two chunks
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(history[i].first.pipeline_chunk_bytes, 0);
  EXPECT_EQ(history[3].first.pipeline_chunk_bytes, 128 * 1024);
  EXPECT_EQ(history[4].first.pipeline_chunk_bytes, 64 * 1024);
  EXPECT_EQ(tuner.settings().pipeline_chunk_bytes, 64 * 1024);
  // The log keeps Horovod's columns: a chunk's row reads like its base row.
  std::ifstream log(config.log_path);
  std::string line;
  int rows = -1;  // the header
  while (std::getline(log, line)) ++rows;
  EXPECT_EQ(rows, 6);  // every sample, then the best
  std::remove(config.log_path.c_str());
  // No chunk below 32 KiB is tried; a transport without a chunk gets none.
  config.log_path.clear();
  Autotuner small = run_chunk_job(config, 64 * 1024);
  EXPECT_EQ(small.history().size(), 4u);
  EXPECT_EQ(small.history().back().first.pipeline_chunk_bytes, 32 * 1024);
  EXPECT_EQ(run_chunk_job(config, 0).history().size(), 3u);
}

// Runs a job of one 4 MiB tensor per step whose throughput depends on the
// gradient bucket alone (fastest at `fastest` bytes), with an optimizer
// that declared buckets of `configured` bytes over `total` bytes of
// gradients (`configured` < 0: no optimizer declared any).
Autotuner run_bucket_job(int64_t configured, int64_t total, int64_t fastest) {
  TunedSettings initial{128ll << 20, 0.001, true, true, true};
  Autotuner tuner(tuning(1, 0, 1), initial, false);
  if (configured >= 0) tuner.declare_gradient_bucket(configured, total);
  tuner.declare_gradient_bucket(123, 456);  // only the first declaration counts
  Response r;
  r.names = {"grad"};
  r.dtype = DataType::kFloat32;
  r.shapes = {{1 << 20}};
  auto now = Autotuner::Clock::now();
  for (int step = 0; step < 100000 && !tuner.done(); ++step) {
    double throughput = tuner.settings().gradient_bucket_bytes == fastest ? 120.0 : 100.0;
    now += std::chrono::nanoseconds(static_cast<int64_t>(4.0 * (1 << 20) / throughput * 1000));
    tuner.observe({r}, now);
  }
  return tuner;
}

HVD_TEST(autotune_tries_other_gradient_buckets_last_and_skips_those_that_cut_alike) {
  const int64_t mib = 1 << 20;
  // 25 MiB buckets over 6.6 MB: a quarter (two buckets) and a sixteenth; four
  // times as large would make one bucket, like the configured size.
  Autotuner tuner = run_bucket_job(25 * mib, 6600000, 25 * mib / 16);
  EXPECT_TRUE(tuner.done());
  auto history = tuner.history();
  EXPECT_EQ(history.size(), 4u);  // the defaults, the cache off, then two bucket sizes
  EXPECT_EQ(history[0].first.gradient_bucket_bytes, -1);
  EXPECT_EQ(history[1].first.gradient_bucket_bytes, -1);
  EXPECT_EQ(history[2].first.gradient_bucket_bytes, 25 * mib / 4);
  EXPECT_EQ(history[3].first.gradient_bucket_bytes, 25 * mib / 16);
  EXPECT_EQ(tuner.settings().gradient_bucket_bytes, 25 * mib / 16);
  // Over 100 MiB, four times the size is tried as well; the configured size
  // stays when nothing beats it (-1: as configured).
  history = run_bucket_job(25 * mib, 100 * mib, 7).history();
  EXPECT_EQ(history.size(), 5u);
  EXPECT_EQ(history[4].first.gradient_bucket_bytes, 100 * mib);
  EXPECT_EQ(run_bucket_job(25 * mib, 100 * mib, 7).settings().gradient_bucket_bytes, -1);
  // Nothing below 256 KiB: 1 MiB buckets try 256 KiB and 4 MiB only.
  history = run_bucket_job(mib, 100 * mib, 7).history();
  EXPECT_EQ(history.size(), 4u);
  EXPECT_EQ(history[2].first.gradient_bucket_bytes, mib / 4);
  EXPECT_EQ(history[3].first.gradient_bucket_bytes, 4 * mib);
  // No optimizer declared buckets, or buckets are off: no bucket phase (the
  // declaration of 123 bytes in run_bucket_job comes second, or makes no candidate).
  EXPECT_EQ(run_bucket_job(-1, 0, 7).history().size(), 2u);
  EXPECT_EQ(run_bucket_job(0, 100 * mib, 7).history().size(), 2u);
}
