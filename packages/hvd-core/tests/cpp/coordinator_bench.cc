// coordinator_bench.cc - the coordinator's CPU cost per step as the set
// grows: P members each report T small allreduces (decoded from the wire
// format, as they arrive), the coordinator matches, checks and fuses them
// and encodes the responses for the workers. No network: this is the part
// of negotiation that grows with P x T on one CPU (docs/scaling.md).
//   usage: coordinator_bench [steps=200] [members tensors]  (one configuration)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "engine/coordinator.h"
#include "engine/message.h"

using namespace hvd;

namespace {

// Microseconds per step, and the size of one worker's request message and
// of the response message.
struct StepCost {
  double us;
  size_t request_bytes;
  size_t response_bytes;
};

StepCost measure(int members, int tensors, size_t cache_capacity, int steps) {
  CoordinatorConfig config;
  for (int m = 0; m < members; ++m) config.global_ranks.push_back(m);
  config.cache_capacity = cache_capacity;
  config.cycle_time_seconds = 0;  // respond as soon as everything is ready
  Coordinator coordinator(config, nullptr);
  std::vector<RequestMeta> metas(static_cast<size_t>(tensors));
  for (int t = 0; t < tensors; ++t) {
    metas[static_cast<size_t>(t)].name = "model.layer" + std::to_string(t) + ".weight.grad";
    metas[static_cast<size_t>(t)].shape = {4};
  }
  const std::string request = encode_requests(metas);
  size_t response_bytes = 0;
  auto run_step = [&] {
    const auto now = Clock::now();
    for (int m = 0; m < members; ++m) {
      for (auto& meta : decode_requests(request)) coordinator.add_request(m, std::move(meta), now);
    }
    Clock::time_point wake_at = Clock::time_point::max();
    auto responses = coordinator.take_responses(Clock::now(), &wake_at);
    response_bytes = encode_responses(responses).size();
  };
  for (int i = 0; i < 5; ++i) run_step();  // warm: the cache fills
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) run_step();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return {us / steps, request.size(), response_bytes};
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  if (argc > 3) {
    StepCost cost = measure(std::atoi(argv[2]), std::atoi(argv[3]), 1024, steps);
    std::printf("%.1f us per step (cached)\n", cost.us);
    return 0;
  }
  std::printf("%8s %6s %14s %14s %12s %12s\n", "members", "T", "cached us", "uncached us", "request B",
              "response B");
  for (int members : {2, 8, 32, 128, 512, 1024}) {
    for (int tensors : {1, 10, 100}) {
      const int n = std::max(3, steps * 8 / members);
      StepCost cached = measure(members, tensors, 1024, n);
      StepCost uncached = measure(members, tensors, 0, n);
      std::printf("%8d %6d %14.1f %14.1f %12zu %12zu\n", members, tensors, cached.us, uncached.us,
                  cached.request_bytes, cached.response_bytes);
    }
  }
  return 0;
}
