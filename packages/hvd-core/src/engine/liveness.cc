// liveness.cc - see liveness.h.
#include "engine/liveness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace hvd {
namespace {

std::string format_timeout(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace

LivenessReporter::LivenessReporter(std::unique_ptr<Store> store, std::string key, double peer_timeout_seconds)
    : store_(std::move(store)), key_(std::move(key)), peer_timeout_seconds_(peer_timeout_seconds) {
  thread_ = std::thread([this] { run(); });
}

LivenessReporter::~LivenessReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  store_->try_set(key_, "stopped", 1.0);
}

void LivenessReporter::run() {
  // Four beats per peer timeout: a beat lost to a busy store or a slow
  // scheduler does not make the rank look frozen.
  const double interval = std::max(0.25, peer_timeout_seconds_ / 4);
  const auto wait = std::chrono::duration<double>(interval);
  const std::string timeout = " " + format_timeout(peer_timeout_seconds_);
  std::unique_lock<std::mutex> lock(mu_);
  for (uint64_t beat = 1; !stopping_; ++beat) {
    lock.unlock();
    store_->try_set(key_, std::to_string(beat) + timeout, interval);
    lock.lock();
    cv_.wait_for(lock, wait, [this] { return stopping_; });
  }
}

}  // namespace hvd
