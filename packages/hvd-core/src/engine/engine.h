// engine.h - the process-wide engine: start-up from the environment
// (topology, rendezvous, peer addresses), the registry of process sets,
// the timeline, and shutdown. One Engine exists between hvd_init() and
// hvd_shutdown(); a later hvd_init() builds a fresh one (elastic training).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "engine/liveness.h"
#include "engine/process_set.h"
#include "engine/timeline.h"
#include "hvd/c_api.h"

namespace hvd {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
  std::vector<std::string> hosts;  // global rank -> host name
};

class Engine {
 public:
  // The running engine, or Error(kNotInitialized) with Horovod's wording.
  static std::shared_ptr<Engine> get();
  static bool initialized();
  // Starts the engine. While one runs this does nothing, unless it has
  // failed (a peer died or left, the ranks diverged): then it is shut down
  // and a new one started, as shutdown() and init() would.
  static void init(const hvd_init_args* args);
  static void shutdown();
  // Why the running engine can do no more collectives; empty while it works
  // (or when none runs).
  static std::shared_ptr<const Error> failure();
  // hvd_abort: fails every process set of the running engine, this rank's
  // and its peers', with `reason`. Does nothing when none runs.
  static void abort(const std::string& reason);

  ~Engine();
  const Topology& topology() const { return topology_; }
  // Throws kInvalidArgument for an unknown id.
  std::shared_ptr<ProcessSetRuntime> process_set(int32_t id);
  std::vector<int32_t> process_set_ids();
  int32_t add_process_set(std::vector<int> ranks);
  void remove_process_set(int32_t id);
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();

 private:
  Engine() = default;
  void start(const hvd_init_args* args);
  void stop();
  void abort_all(const Error& error);
  std::shared_ptr<const Error> global_set_failure();
  std::shared_ptr<ProcessSetRuntime> create_process_set(int32_t id, std::vector<int> ranks,
                                                        const Interrupt& interrupt = {});
  // For creating set `id` after the global set: throws Interrupted, naming
  // the cause, once the global set has failed (a peer died or froze), so
  // members waiting for a lost member end within the peer timeout rather
  // than the start-up timeout.
  Interrupt unless_global_set_failed(int32_t id);
  // Runs a collective on the global set from inside the engine and waits.
  std::vector<std::vector<int32_t>> allgather_on_global_set(const std::vector<int32_t>& values,
                                                            const std::string& name);

  Topology topology_;
  EngineConfig config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ConnectionManager> connections_;
  std::unique_ptr<LivenessReporter> liveness_;
  Timeline timeline_;
  ProcessSetContext context_;
  std::mutex sets_mu_;
  std::map<int32_t, std::shared_ptr<ProcessSetRuntime>> sets_;
  int32_t next_set_id_ = 1;
  uint64_t internal_ops_ = 0;
};

}  // namespace hvd
