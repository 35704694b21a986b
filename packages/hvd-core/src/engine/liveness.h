// liveness.h - a rank's sign of life, kept fresh in the rendezvous store.
//
// When a rank freezes (SIGSTOP, a stuck host), its peers do notice, but in a
// ring every rank that waits on the frozen one stops sending too, so each
// survivor may blame its own neighbour. The launcher hears from every rank
// directly: each engine refreshes a key of its own, and the launcher stops
// the rank whose key went stale (see docs/rendezvous.md, "Liveness").
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/store.h"

namespace hvd {

// Key: <job>/<start>/alive/<rank>. Value: "<beat> <peer timeout seconds>",
// the beat counting up; "stopped" once the engine shut down cleanly (the
// process may go on without an engine, and must not look frozen).
class LivenessReporter {
 public:
  LivenessReporter(std::unique_ptr<Store> store, std::string key, double peer_timeout_seconds);
  ~LivenessReporter();
  LivenessReporter(const LivenessReporter&) = delete;
  LivenessReporter& operator=(const LivenessReporter&) = delete;

 private:
  void run();

  std::unique_ptr<Store> store_;  // its own connection: the engine's may be busy
  const std::string key_;
  const double peer_timeout_seconds_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hvd
