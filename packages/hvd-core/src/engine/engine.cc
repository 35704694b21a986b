// engine.cc - start-up, process-set registry and shutdown.
//
// Start-up contract (the same variables Horovod's Gloo mode uses):
//   HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE,
//   HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE, HOROVOD_HOSTNAME,
//   HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT, and the
//   job secret HOROVOD_SECRET_KEY. Under mpirun the rank comes from the MPI
//   launcher (OMPI_COMM_WORLD_*, PMI_*). Nothing set: rank 0 of 1. These and
//   every knob are parsed in engine/engine_config.cc.
#include "engine/engine.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>

#include "auth/hmac_sha256.h"
#include "common/cpu_share.h"
#include "common/error.h"
#include "common/logging.h"
#include "engine/engine_config.h"
#include "engine/host_result_pool.h"
#include "engine/inert_knobs.h"
#include "net/connection_manager.h"
#include "rendezvous/store.h"

namespace hvd {
namespace {

// Two locks, so that a start-up waiting up to HOROVOD_GLOO_TIMEOUT_SECONDS
// for its peers does not block every other thread's hvd.rank() or
// hvd.is_initialized() (or a fork) for that long.
std::mutex g_lifecycle_mu;  // serialises init and shutdown; held through start-up's network waits
std::mutex g_mu;            // guards the variables below; held only briefly
bool g_lifecycle_busy = false;  // an init or shutdown holds g_lifecycle_mu
std::shared_ptr<Engine> g_engine;
uint64_t g_generation = 0;  // inits so far in this process; keeps store keys apart
// In a process forked while an engine ran: the parent's pid (0 otherwise).
pid_t g_forked_from = 0;
std::once_flag g_fork_handlers;

const char* kNotInitialized = "Horovod has not been initialized; use hvd.init().";

// fork() copies the engine object but not its threads, and its sockets and
// shared memory stay the parent's: a collective from the child would be
// taken as the parent's by the peers and break the job. The child forgets the
// engine without destroying it (its destructor would say goodbye on the
// parent's connections) and refuses every call. g_mu is held across the fork
// so the child never inherits it locked by a thread it does not have. A
// child forked while another thread was starting or stopping an engine
// inherits g_lifecycle_mu locked for good: it refuses every call too.
void before_fork() { g_mu.lock(); }
void after_fork_in_parent() { g_mu.unlock(); }
void after_fork_in_child() {
  if (g_engine || g_lifecycle_busy) {
    g_forked_from = getppid();
    if (g_engine) new std::shared_ptr<Engine>(std::move(g_engine));  // leaked on purpose
  }
  g_mu.unlock();
}

[[noreturn]] void throw_forked_child() {
  throw_error(ErrorCode::kNotInitialized,
              "hvd cannot be used in this process: it was forked from process " + std::to_string(g_forked_from) +
                  " after hvd.init() there, and the engine's threads and connections belong to that process. "
                  "Call hvd functions in the parent only, or start child processes that need hvd with the "
                  "'spawn' start method (multiprocessing.set_start_method('spawn'))");
}

// Holds g_lifecycle_mu for an init or shutdown, after refusing a forked child.
class LifecycleLock {
 public:
  LifecycleLock() {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (g_forked_from != 0) throw_forked_child();
    }
    lock_ = std::unique_lock<std::mutex>(g_lifecycle_mu);
    std::lock_guard<std::mutex> lock(g_mu);
    g_lifecycle_busy = true;
  }
  ~LifecycleLock() {
    std::lock_guard<std::mutex> lock(g_mu);
    g_lifecycle_busy = false;
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace

std::shared_ptr<Engine> Engine::get() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_engine) {
    if (g_forked_from != 0) throw_forked_child();
    throw_error(ErrorCode::kNotInitialized, kNotInitialized);
  }
  return g_engine;
}

bool Engine::initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_engine != nullptr;
}

std::shared_ptr<const Error> Engine::global_set_failure() {
  std::lock_guard<std::mutex> lock(sets_mu_);
  auto it = sets_.find(0);
  return it == sets_.end() ? nullptr : it->second->failure();
}

std::shared_ptr<const Error> Engine::failure() {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    engine = g_engine;
  }
  return engine ? engine->global_set_failure() : nullptr;
}

void Engine::abort(const std::string& reason) {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    engine = g_engine;
  }
  if (!engine) return;
  std::string why = "rank " + std::to_string(engine->topology_.rank) + " aborted the job (hvd_abort)";
  engine->abort_all(Error(ErrorCode::kInternal, reason.empty() ? why : why + ": " + reason, "", {engine->topology_.rank}));
}

void Engine::init(const hvd_init_args* args) {
  std::call_once(g_fork_handlers, [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  LifecycleLock lifecycle;
  std::shared_ptr<Engine> current;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    current = g_engine;
  }
  if (current) {
    std::shared_ptr<const Error> why = current->global_set_failure();
    if (!why) return;
    // A failed engine is of no use: every rank meets again in a new one.
    HVD_LOG(kInfo, "replacing the engine that failed: " << why->what());
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_engine.reset();
    }
    current->stop();
  }
  std::shared_ptr<Engine> engine(new Engine());
  engine->start(args);
  std::lock_guard<std::mutex> lock(g_mu);
  g_engine = std::move(engine);
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_forked_from != 0) return;  // the engine is the parent's
  }
  LifecycleLock lifecycle;
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    engine.swap(g_engine);
  }
  if (engine) engine->stop();
  // Blocks kept for results the caller has freed serve no one after
  // shutdown; results still held stay valid (they are not in the pool).
  HostResultPool::instance().clear();
}

Engine::~Engine() { stop(); }

void Engine::start(const hvd_init_args* args) {
  Topology& t = topology_;
  const LaunchPlacement placement = LaunchPlacement::from_environment();
  t.rank = placement.rank;
  t.size = placement.size;
  set_log_rank(t.size > 1 ? t.rank : -1);
  const std::string& hostname = placement.hostname;
  config_ = EngineConfig::from_environment();

  // Static sets are checked before anything connects: every rank finds the
  // same fault, and nothing is left half started.
  std::vector<int> all(static_cast<size_t>(t.size));
  for (int r = 0; r < t.size; ++r) all[static_cast<size_t>(r)] = r;
  std::vector<std::vector<int>> static_sets;
  if (args != nullptr && args->struct_size > offsetof(hvd_init_args, num_process_sets)) {
    size_t offset = 0;
    for (size_t i = 0; i < args->num_process_sets; ++i) {
      int32_t n = args->process_set_sizes[i];
      std::vector<int> ranks(args->process_set_ranks + offset, args->process_set_ranks + offset + n);
      offset += static_cast<size_t>(n);
      std::sort(ranks.begin(), ranks.end());
      const std::string which = "process set " + std::to_string(i + 1);
      if (ranks.empty() || std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
        throw_error(ErrorCode::kInvalidArgument, which + " must name distinct ranks, at least one");
      }
      for (int r : ranks) {
        if (r < 0 || r >= t.size) {
          throw_error(ErrorCode::kInvalidArgument, which + " names rank " + std::to_string(r) + ", but the job has " +
                                                       std::to_string(t.size) + " ranks");
        }
      }
      if (ranks == all) {
        throw_error(ErrorCode::kInvalidArgument, which + " has every rank: it duplicates the global process set");
      }
      auto same = std::find(static_sets.begin(), static_sets.end(), ranks);
      if (same != static_sets.end()) {
        throw_error(ErrorCode::kInvalidArgument, which + " duplicates process set " +
                                                     std::to_string(same - static_sets.begin() + 1) +
                                                     " (the same ranks): process sets must differ");
      }
      static_sets.push_back(std::move(ranks));
    }
  }
  // From here on the store is used: this start consumes a generation even
  // if it fails, so a retry never reads the addresses a failed one left.
  const uint64_t generation = g_generation++;
  std::string key_prefix = "g" + std::to_string(generation) + "/";
  // An elastic worker joins the round the elastic driver assigned it: every
  // member of the round uses that round's keys, however many times each of
  // them has started before (a new worker has started none).
  const RendezvousConfig rendezvous = RendezvousConfig::from_environment(placement);
  if (!rendezvous.round.empty()) key_prefix = "r" + rendezvous.round + "/";
  // Per rank, the kernel it runs on (machine_id(); empty: unknown).
  std::vector<std::string> machines;
  if (t.size == 1) {
    store_ = std::make_unique<MemoryStore>();
    t.hosts = {hostname};
  } else {
    const std::string& addr = rendezvous.addr;
    const int port = rendezvous.port;
    const std::string& secret = rendezvous.secret;
    // Keys and shared-memory names derive from the secret, so they are
    // unique per job and not guessable by other users of the machine.
    key_prefix = to_hex(sha256(secret.data(), secret.size())).substr(0, 16) + "/" + key_prefix;
    store_ = make_http_store(addr, port, secret, config_.connect_timeout_seconds);
    LocalEndpoint endpoint = choose_local_endpoint(addr, port, rendezvous.iface);
    connections_ = std::make_unique<ConnectionManager>(t.rank, secret, endpoint.address,
                                                       config_.connect_timeout_seconds, config_.data_protection);
    connections_->set_unreachable_seconds(config_.peer_timeout_seconds);
    PrefixStore store(*store_, key_prefix);
    std::ostringstream me;
    me << hostname << "\n" << connections_->address() << "\n" << ::getpid() << "\n" << endpoint.iface << "\n"
       << config_.settings_that_must_agree() << "\n" << machine_id();
    store.set("peer/" + std::to_string(t.rank), me.str());
    std::vector<std::string> addresses(static_cast<size_t>(t.size));
    std::vector<std::string> locations(static_cast<size_t>(t.size));
    std::vector<std::string> settings(static_cast<size_t>(t.size));
    t.hosts.resize(static_cast<size_t>(t.size));
    machines.resize(static_cast<size_t>(t.size));
    for (int r = 0; r < t.size; ++r) {
      std::string info = store.get("peer/" + std::to_string(r), config_.connect_timeout_seconds);
      // The elastic driver puts "!<why>" in the place of a rank that will
      // never come (it failed before publishing its address).
      if (!info.empty() && info[0] == '!') {
        throw_error(ErrorCode::kInternal, "rank " + std::to_string(r) + " will not join: " + info.substr(1));
      }
      std::istringstream in(info);
      std::string pid, iface;
      std::getline(in, t.hosts[static_cast<size_t>(r)]);
      std::getline(in, addresses[static_cast<size_t>(r)]);
      std::getline(in, pid);
      std::getline(in, iface);
      std::getline(in, settings[static_cast<size_t>(r)]);
      std::getline(in, machines[static_cast<size_t>(r)]);
      locations[static_cast<size_t>(r)] = "host " + t.hosts[static_cast<size_t>(r)] + (iface.empty() ? "" : ", " + iface);
    }
    // Ranks that disagree on these would pick different transports and blame
    // each other for the failure that follows; every rank finds the same
    // first rank that differs from rank 0 and says so.
    for (int r = 1; r < t.size; ++r) {
      SettingDifference d = first_setting_difference(settings[0], settings[static_cast<size_t>(r)]);
      if (d.variable.empty()) continue;
      throw_error(ErrorCode::kInvalidArgument,
                  d.variable + " must be the same on every rank: rank 0 (" + locations[0] + ") has " + d.first_value +
                      ", rank " + std::to_string(r) + " (" + locations[static_cast<size_t>(r)] + ") has " +
                      d.second_value);
    }
    connections_->set_peer_addresses(addresses, locations);
    liveness_ = std::make_unique<LivenessReporter>(
        make_http_store(addr, port, secret, config_.connect_timeout_seconds),
        key_prefix + "alive/" + std::to_string(t.rank), config_.peer_timeout_seconds);
  }

  // Local and cross topology: from the launcher when given, else derived
  // from the host names every rank published.
  std::vector<int> same_host;
  for (int r = 0; r < t.size; ++r) {
    if (t.hosts[static_cast<size_t>(r)] == hostname) same_host.push_back(r);
  }
  int derived_local_rank = static_cast<int>(std::find(same_host.begin(), same_host.end(), t.rank) - same_host.begin());
  t.local_rank = placement.local_rank.value_or(derived_local_rank);
  t.local_size = placement.local_size.value_or(static_cast<int>(same_host.size()));
  std::vector<std::string> host_order;
  std::map<std::string, int> host_counts;
  for (const auto& h : t.hosts) {
    if (!host_counts.count(h)) host_order.push_back(h);
    ++host_counts[h];
  }
  // Cross rank: this rank's position among the ranks with its local rank.
  int derived_cross_rank = 0, derived_cross_size = 0;
  {
    std::map<std::string, int> seen;
    for (int r = 0; r < t.size; ++r) {
      int lr = seen[t.hosts[static_cast<size_t>(r)]]++;
      if (lr == derived_local_rank) {
        if (r == t.rank) derived_cross_rank = derived_cross_size;
        ++derived_cross_size;
      }
    }
  }
  t.cross_rank = placement.cross_rank.value_or(derived_cross_rank);
  t.cross_size = placement.cross_size.value_or(derived_cross_size);
  t.homogeneous = true;
  for (const auto& [h, n] : host_counts) t.homogeneous = t.homogeneous && n == host_counts.begin()->second;
  // Spinning only pays when every rank polling on this machine can have a
  // CPU to itself. Ranks with other host names can still share the machine
  // (containers, network namespaces): count ranks by kernel, where known.
  const std::string my_machine = machines.empty() ? "" : machines[static_cast<size_t>(t.rank)];
  int ranks_on_machine = 0;
  for (int r = 0; r < t.size; ++r) {
    const bool same_kernel = !my_machine.empty() && machines[static_cast<size_t>(r)] == my_machine;
    if (same_kernel || t.hosts[static_cast<size_t>(r)] == hostname) ++ranks_on_machine;
  }
  const unsigned cpus = usable_cpus();
  config_.spin = config_.spin_wait.value_or(static_cast<unsigned>(ranks_on_machine) <= cpus);
  std::ostringstream waits;
  waits << "waits " << (config_.spin ? "busy-poll" : "yield") << " ("
        << (config_.spin_wait ? "HOROVOD_SPIN_WAIT" : "auto") << ": " << ranks_on_machine
        << " rank(s) of this job on this machine, " << cpus << " usable CPU(s))";

  config_.background_core = background_core_from_environment(t.local_rank, t.local_size);

  context_.config = config_;
  context_.global_rank = t.rank;
  context_.hosts = t.hosts;
  context_.store = store_.get();
  context_.connections = connections_.get();
  context_.timeline = t.rank == 0 ? &timeline_ : nullptr;
  context_.key_prefix = key_prefix;
  context_.on_fatal = [this](const Error& error) { abort_all(error); };

  if (t.rank == 0) {
    const TimelineConfig timeline = TimelineConfig::from_environment();
    if (!timeline.path.empty()) timeline_.start(timeline.path, timeline.mark_cycles);
  }

  create_process_set(0, all);
  for (auto& ranks : static_sets) {
    const int32_t id = next_set_id_++;
    create_process_set(id, std::move(ranks), unless_global_set_failed(id));
  }
  if (t.rank == 0) {
    for (const auto& notice : inert_knob_notices()) HVD_LOG(kWarning, notice);
  }
  HVD_LOG(kInfo, "initialized: rank " << t.rank << " of " << t.size << ", local rank " << t.local_rank << " of "
                                      << t.local_size << ", host " << hostname << "; " << waits.str());
}

std::shared_ptr<ProcessSetRuntime> Engine::create_process_set(int32_t id, std::vector<int> ranks,
                                                              const Interrupt& interrupt) {
  auto runtime = std::make_shared<ProcessSetRuntime>(context_, id, std::move(ranks));
  runtime->start(interrupt);
  std::lock_guard<std::mutex> lock(sets_mu_);
  sets_[id] = runtime;
  return runtime;
}

Interrupt Engine::unless_global_set_failed(int32_t id) {
  // The members agreed on the set through the global set a moment ago, so
  // they were alive then; one lost since fails the global set (its
  // connection closes, or its heartbeats stop for the peer timeout) and
  // would otherwise keep the others waiting for the start-up timeout.
  return [this, id] {
    std::shared_ptr<const Error> why = global_set_failure();
    if (why) {
      throw Interrupted(ErrorCode::kInternal,
                        "process set " + std::to_string(id) + " could not be created: " + why->what(), "",
                        why->ranks());
    }
  };
}

void Engine::stop() {
  std::map<int32_t, std::shared_ptr<ProcessSetRuntime>> sets;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    sets.swap(sets_);
  }
  // Non-global sets first: the global set's goodbye ends the job for peers.
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) it->second->stop();
  sets.clear();
  timeline_.stop();
  connections_.reset();
  liveness_.reset();
  store_.reset();
}

void Engine::abort_all(const Error& error) {
  std::vector<std::shared_ptr<ProcessSetRuntime>> sets;
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    for (auto& [id, s] : sets_) sets.push_back(s);
  }
  for (auto& s : sets) s->abort(error);
}

std::shared_ptr<ProcessSetRuntime> Engine::process_set(int32_t id) {
  std::lock_guard<std::mutex> lock(sets_mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw_error(ErrorCode::kInvalidArgument, "process set " + std::to_string(id) +
                                                 " does not exist (it was never added, or it was removed)");
  }
  return it->second;
}

std::vector<int32_t> Engine::process_set_ids() {
  std::lock_guard<std::mutex> lock(sets_mu_);
  std::vector<int32_t> ids;
  for (auto& [id, s] : sets_) ids.push_back(id);
  return ids;
}

std::vector<std::vector<int32_t>> Engine::allgather_on_global_set(const std::vector<int32_t>& values,
                                                                  const std::string& name) {
  auto global = process_set(0);
  std::vector<int64_t> shape{static_cast<int64_t>(values.size())};
  auto* h = new hvd_handle();
  TensorSlot slot;
  slot.meta.name = name;
  slot.meta.collective = Collective::kAllgather;
  slot.meta.dtype = DataType::kInt32;
  slot.meta.shape = shape;
  slot.input = values.data();
  h->tensors.push_back(std::move(slot));
  try {
    global->enqueue(h);
  } catch (...) {
    delete h;
    throw;
  }
  handle_wait(h, -1);
  if (h->failed) {
    Error e = h->error;
    handle_unref(h);
    throw e;
  }
  // Every rank's values have the same length here only if they agree; the
  // first dimensions tell each rank's share.
  const int32_t* data = static_cast<const int32_t*>(h->tensors[0].result_data);
  int64_t total = h->tensors[0].owned_result->dl_tensor.shape[0];
  std::vector<std::vector<int32_t>> out;
  // Each rank sent [n, v1..vn]: split the concatenation back up.
  int64_t pos = 0;
  while (pos < total) {
    int32_t n = data[pos];
    out.emplace_back(data + pos + 1, data + pos + 1 + n);
    pos += 1 + n;
  }
  handle_unref(h);
  return out;
}

int32_t Engine::add_process_set(std::vector<int> ranks) {
  if (!config_.dynamic_process_sets) {
    throw_error(ErrorCode::kInvalidArgument,
                "dynamic process sets are disabled: set HOROVOD_DYNAMIC_PROCESS_SETS=1 before hvd.init(), "
                "or pass process_sets= to hvd.init()");
  }
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty() || std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end() || ranks.front() < 0 ||
      ranks.back() >= topology_.size) {
    throw_error(ErrorCode::kInvalidArgument, "a process set needs distinct ranks in [0, " +
                                                 std::to_string(topology_.size) + ")");
  }
  std::vector<int32_t> proposal{static_cast<int32_t>(ranks.size())};
  proposal.insert(proposal.end(), ranks.begin(), ranks.end());
  auto all = allgather_on_global_set(proposal, "process_set.add." + std::to_string(internal_ops_++));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != all[0]) {
      throw_error(ErrorCode::kInvalidArgument, "add_process_set was called with different ranks on rank 0 and rank " +
                                                   std::to_string(r) + ": every rank must add the same process set");
    }
  }
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    for (auto& [id, s] : sets_) {
      if (s->ranks() == ranks) {
        throw_error(ErrorCode::kInvalidArgument, "a process set with these ranks already exists (id " +
                                                     std::to_string(id) + ")");
      }
    }
  }
  int32_t id = next_set_id_++;
  create_process_set(id, ranks, unless_global_set_failed(id));
  return id;
}

void Engine::remove_process_set(int32_t id) {
  if (!config_.dynamic_process_sets) {
    throw_error(ErrorCode::kInvalidArgument,
                "dynamic process sets are disabled: set HOROVOD_DYNAMIC_PROCESS_SETS=1 before hvd.init()");
  }
  if (id == 0) throw_error(ErrorCode::kInvalidArgument, "the global process set (id 0) cannot be removed");
  auto runtime = process_set(id);
  auto all = allgather_on_global_set({1, id}, "process_set.remove." + std::to_string(internal_ops_++));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != all[0]) {
      throw_error(ErrorCode::kInvalidArgument, "remove_process_set was called with different ids on rank 0 and rank " +
                                                   std::to_string(r));
    }
  }
  {
    std::lock_guard<std::mutex> lock(sets_mu_);
    sets_.erase(id);
  }
  runtime->stop();
}

void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  if (topology_.rank != 0) return;
  timeline_.start(path, mark_cycles);
}

void Engine::stop_timeline() { timeline_.stop(); }

}  // namespace hvd
