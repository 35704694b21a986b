// shm_communicator.cc - the shared-memory data plane: arena creation and
// attachment, the step barrier (spin, then shared futex, with abort / dead
// peer / no-progress checks while waiting) and every collective as a
// pipeline of chunks through double-buffered per-member slots.
//
// Buffer rule that makes one barrier per chunk enough: data written into
// buffer (step % 2) before barrier `step` may be read by anyone after it,
// until they arrive at barrier step + 1; so writes into a buffer never race
// with reads of the same buffer two steps earlier.
#include "transport/shm/shm_communicator.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "auth/hmac_sha256.h"
#include "common/cpu_share.h"
#include "common/error.h"
#include "common/logging.h"
#include "reduce/reduce.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_copy.h"

namespace hvd {

namespace {

constexpr uint64_t kArenaMagic = 0x6876645f73686d31ULL;  // "hvd_shm1"
constexpr size_t kAbortReasonBytes = 256;
// Chunk size of the pipelined collectives. Members that spin meet at each
// chunk's barrier within microseconds, so chunks that stay in the cache
// win; members that yield may wait out a time slice per barrier, so their
// slots are larger (allreduces time whole slots against smaller chunks:
// allreduce_chunk_way). 512 KiB (256 KiB until the eleventh session):
// on the AMD EPYC VM, P=2, three alternated rounds of HVD_SHM_SLOT_BYTES,
// 256 / 512 KiB slots: allreduce 512 KiB 58-59 / 51-52 us, 1 MiB 101-116 /
// 76-90 us, 8 MiB 838-869 / 554-587 us, 16 MiB even; broadcast 1 MiB
// 80-114 / 52-61 us; allgather even (docs/benchmarks.md).
constexpr size_t kSpinningSlotBytes = 512 * 1024;
constexpr size_t kSleepingSlotBytes = 1024 * 1024;
// Below this, every member reduces the whole (small) payload itself: one
// barrier instead of two, which is what small-message latency is made of.
constexpr size_t kSmallAllreduceBytes = ShmCommunicator::kLanePayloadBytes;
// Long enough to cover the usual skew between members within a pipelined
// collective; short enough not to starve a descheduled peer of its core.
// Spinning is only enabled when every member has a CPU, so a peer that is
// late by up to a couple of milliseconds is still cheaper to spin for than
// a futex sleep, whose wake-up costs tens of microseconds on virtual
// machines and, repeated per chunk, would dominate large collectives.
constexpr auto kSpinTime = std::chrono::microseconds(2000);
constexpr auto kMinSpinTime = std::chrono::microseconds(200);
// A peer not there after this long has most likely lost its CPU (other work
// on the machine): spinning on, with a sched_yield() between polls, lets it
// (or whatever holds the CPU) run, where pure spinning would hold the CPU
// for the rest of the budget. With nothing else runnable sched_yield returns
// at once, so an idle machine only pays the system call. Measured under load
// (a CI run on the 2 CPUs, P=2 shm_allreduce_bench, three interleaved rounds):
// 16 MiB 7.2-26 ms -> 5.7-6.4 ms, 4 MiB 1.9-5.0 -> 1.3-1.7 ms; 4 B unchanged.
constexpr auto kSpinBeforeYield = std::chrono::microseconds(20);
constexpr auto kYieldTime = std::chrono::microseconds(2000);
constexpr auto kFutexSlice = std::chrono::milliseconds(10);
// An allgatherv whose largest piece is at least this big reads the other
// members' pieces straight out of their memory (process_vm_readv) instead of
// passing them through the slots: each byte is copied once instead of twice
// and there are two barriers instead of one per slot-sized chunk. Measured
// at P=2 on a 2-CPU VM (docs/benchmarks.md): 1 MiB outputs 0.26 -> 0.14 ms,
// 256 MiB 52 -> 41 ms. Not tuned finely: at 256 KiB outputs (128 KiB
// pieces) the two paths took the same time, and below that the slot path
// needs one barrier where this one needs two.
constexpr size_t kSingleCopyMinBytes = 128 * 1024;
// A broadcast at least this big goes from the root's buffer straight into
// the other members' (broadcast_single_copy): one copy instead of two and
// two barriers instead of one per slot-sized region. Measured at P=2 on a
// 2-CPU VM, broadcast benchmark, slots / single copy (each member reading
// all of it): 1 MiB 82 / 89 us, 2 MiB 139 / 172, 4 MiB 275 / 255, 8 MiB
// 772 / 576, 16 MiB 2245 / 1191, 64 MiB 7732 / 5942 us: below 4 MiB the
// slots' copies stay in the cache. Since the root shares the copying
// (seventeenth session, AMD EPYC VM, two alternated runs, reading all /
// shared): 4 MiB 534-538 / 245-247 us, 16 MiB 2746-3076 / 1173-1175, 64 MiB
// 10803-10940 / 5871-8019; 3 MiB through the slots 204-207 us against
// 248-266 shared, so the threshold stayed.
constexpr size_t kSingleCopyBroadcastMinBytes = 4 * 1024 * 1024;
// An allreduce of [kSingleCopyAllreduceMinBytes, kSingleCopyAllreduceMaxBytes)
// among members that spin is a reduce-scatter plus an allgather that read
// the other members' buffers out of their processes (allreduce_single_copy):
// three barriers instead of one per slot-sized chunk, but process_vm_readv
// copies at well under half memcpy's speed on the VM this was measured on
// (its page pinning), so the slots' extra in-cache copies are cheaper
// except in between. Measured at P=2 on a 2-CPU VM, shm_allreduce_bench,
// five interleaved rounds (docs/benchmarks.md): slots / single copy 1 MiB
// 0.17 / 0.23 ms, 2 MiB 0.37 / 0.34, 4 MiB 0.74 / 0.62, 16 MiB 3.0 / 2.5,
// 32 MiB 6.1 / 6.4, 64 MiB 14.2 / 17.0 ms (from 32 MiB the single copy's
// extra trip to memory, reading the reduced shares back, costs more than
// the barriers it saves). On the AMD EPYC VM the benchmarks now run on, the
// slots win from 8 MiB (allreduce_benchmark, three alternated rounds,
// HVD_SHM_SINGLE_COPY=1 / =0, medians: 2 MiB 0.24 / 0.22 ms, 4 MiB 0.40 /
// 0.43, 8 MiB 1.17 / 0.96, 16 MiB 2.9 / 2.15), and in later sittings the
// order changed from minute to minute (4 MiB in place, HVD_SHM_SINGLE_COPY=1
// / =0: 0.60-1.95 / 0.37-0.44 ms in three alternated runs of the fourteenth
// session, where earlier sittings had the single copy ahead). So inside the
// window member 0 times both ways per size class and takes the faster one
// (allreduce_route); outside it the slots won in every sitting.
// Members that outnumber the CPUs keep to the slots: there the slots are
// 1 MiB and the single copy gained nothing at P=4.
constexpr size_t kSingleCopyAllreduceMinBytes = 2 * 1024 * 1024;
constexpr size_t kSingleCopyAllreduceMaxBytes = 32 * 1024 * 1024;
// What allreduce_single_copy reduces at a time: each other member's part of
// it is read into scratch that stays in the L2 cache for the reduction.
constexpr size_t kSingleCopyReduceChunkBytes = 256 * 1024;
// A fused allreduce runs in pieces of this many bytes (Executor::
// allreduce_in_pieces; in the single copy's window, in one piece): packed, reduced and unpacked while a piece is in the
// cache, where packing everything first sent each byte to memory and back
// twice more. Measured on a 2-CPU VM, a grouped allreduce of the training
// benchmark's 102 gradients (6.6 MB), pieces of 0 (all at once) / 512 KiB /
// 1 MiB / 2 MiB, medians in one process, three runs: P=2 2.46-2.76 /
// 1.53-1.69 / 1.69-1.78 / 1.92-2.11 ms; P=3 6.0 / 4.6 / 4.3 ms and P=4 8.2 /
// 5.1 / 5.8 ms (0 / 512 KiB / 1 MiB); sixteen 4 MiB tensors at P=2
// 28.5-49.6 against 13.2-40.5 ms with 512 KiB pieces (docs/benchmarks.md).
constexpr size_t kFusedPieceBytes = 512 * 1024;
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(50);
// The ring a streamed lane call passes through (lane_stream): the root's
// whole for a broadcast, a part per member for an allgather. Each call goes
// on where the last one stopped, so that a payload as large as the ring does
// not overwrite the lines the readers are still copying out of: in a
// two-process probe on the AMD EPYC VM (tools/shm_stream_probe.c), 1 MiB
// payloads in 64 KiB chunks took 121-142 us a pass through a 256 KiB ring
// and 37-44 us through a 1 MiB one; 2-8 MiB rings gained nothing more in
// the broadcast benchmark (docs/benchmarks.md).
constexpr size_t kLaneRingBytes = 1024 * 1024;
constexpr size_t kLaneChunkBytes = 64 * 1024;
constexpr size_t kLaneMinChunkBytes = 16 * 1024;
// Below this many bytes of ring per member an allgather is not streamed.
constexpr size_t kLaneMinPartBytes = 4 * kLaneMinChunkBytes;
// A member that takes the faster way for its large lane calls (stream or
// read, lane_route_read) or large allreduces (single copy or slots,
// allreduce_route) tries the other one for a run of calls every this many
// runs.
constexpr uint64_t kRouteRetryEvery = 64;

using Clock = std::chrono::steady_clock;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Which of `classes` size classes `bytes` falls in: [smallest, 2 * smallest)
// and below is 0, each next one twice as large, the last open-ended.
size_t power_of_two_class(size_t bytes, size_t smallest, size_t classes) {
  size_t c = 0;
  for (size_t b = bytes / smallest; b > 1 && c + 1 < classes; b >>= 1) ++c;
  return c;
}

// A choice member 0 makes for every member a call ahead (allreduce_route,
// allreduce_chunk_way): `word` holds a way of `bits` bits per size class
// and parity of the class's call number. Every member counts the calls of
// each class alike and reads call `call`'s way, which member 0 published
// during the class's last call, before it reaches this call's first
// barrier; member 0 then publishes the next call's way under the other
// parity, which every member reads after this call's last barrier, which
// member 0 passes only after publishing.
int published_way(const std::atomic<uint32_t>& word, unsigned bits, size_t size_class, uint64_t call) {
  const unsigned shift = bits * static_cast<unsigned>(2 * size_class + (call & 1));
  return static_cast<int>((word.load(std::memory_order_acquire) >> shift) & ((1u << bits) - 1));
}

void publish_next_way(std::atomic<uint32_t>& word, unsigned bits, size_t size_class, uint64_t call, int way) {
  const unsigned shift = bits * static_cast<unsigned>(2 * size_class + ((call + 1) & 1));
  const uint32_t mask = ((1u << bits) - 1) << shift;
  const uint32_t was = word.load(std::memory_order_relaxed);  // member 0 alone writes it
  word.store((was & ~mask) | (static_cast<uint32_t>(way) << shift), std::memory_order_release);
}

// Shared (not private) futexes: the waiters live in different processes.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return true;
  char state = line[close_paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

// Identifies this process's PID namespace ("pid:[4026531836]" -> number).
// Peer pids are only meaningful to us when the peer shares it (containers
// on one host may share /dev/shm but not PIDs). 0 = unknown.
uint64_t pid_namespace_id() {
  char link[64] = {0};
  ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n <= 0) return 0;
  uint64_t id = 0;
  for (ssize_t i = 0; i < n; ++i) {
    if (link[i] >= '0' && link[i] <= '9') id = id * 10 + static_cast<uint64_t>(link[i] - '0');
  }
  return id;
}

size_t slot_bytes_from_env(bool spinning) {
  const size_t fallback = spinning ? kSpinningSlotBytes : kSleepingSlotBytes;
  // Internal tuning knob for benchmarks; not part of the user-facing API.
  const char* v = std::getenv("HVD_SHM_SLOT_BYTES");
  if (v == nullptr) return fallback;
  long long parsed = std::atoll(v);
  if (parsed < 4096) return fallback;
  return align_up(static_cast<size_t>(parsed), 4096);
}

}  // namespace

// Per-member state, each on its own cache line so arrivals don't false-share.
struct alignas(64) ShmMemberState {
  std::atomic<uint64_t> arrived_step;
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> departed;
  std::atomic<uint64_t> pid_namespace;
  std::atomic<uint64_t> scratch[2];  // for max_over_members, double-buffered like the slots
  // Single-copy collectives: where this member's input and output are (for
  // an allreduce: its lists of ArrayParts, of these many entries), and
  // whether it failed to read some other member's memory.
  std::atomic<uint64_t> single_copy_input;
  std::atomic<uint64_t> single_copy_output;
  std::atomic<uint64_t> single_copy_input_parts;
  std::atomic<uint64_t> single_copy_output_parts;
  std::atomic<uint32_t> single_copy_failed;
  char abort_reason[kAbortReasonBytes];
};

struct ShmArenaHeader {
  uint64_t magic;
  uint32_t size;
  uint32_t slot_bytes;
  // Member 0's HVD_SHM_SINGLE_COPY, which every member follows: 0 never, 1
  // always where it applies, 2 deny-for-tests, 3 (unset) large allreduces
  // take the single copy or the slots as member 0 timed them faster.
  uint32_t single_copy;
  // Whether member 0 spins (members no more than CPUs), which decides for
  // every member whether large allreduces may be single-copy: spin_ itself
  // may differ between members (their CPU affinity).
  uint32_t members_spin;
  alignas(64) std::atomic<uint32_t> arrived_count;
  alignas(64) std::atomic<uint32_t> generation;
  std::atomic<uint32_t> sleepers;
  alignas(64) std::atomic<uint32_t> aborted_by;  // member index + 1, 0 while healthy
  // Member 0's choices for large allreduces (allreduce_route):
  // bit 2 * size class + parity of the class's call number is set when that
  // call takes the single copy.
  alignas(64) std::atomic<uint32_t> allreduce_routes;
  // Member 0's choices for the slots' stores (allreduce_streamed): bit c is
  // set while allreduces of size class c stream them.
  std::atomic<uint32_t> allreduce_streams;
  // Member 0's choices of chunk and stores (allreduce_chunk_way): bits 4 *
  // size class + 2 * parity of the class's call number hold that call's way.
  std::atomic<uint32_t> allreduce_chunk_ways;
};

// One member's part of the fast lane. Only the member itself writes it.
// A publication is one attempt to run (key, occurrence); members match
// publications by (key, occurrence), which every member counts alike.
enum LanePhase : uint64_t { kLaneEmpty = 0, kLanePublished = 1, kLaneCommitted = 2, kLaneWithdrawn = 3 };
struct ShmCommunicator::LaneArea {
  // (publication number << 2) | LanePhase.
  alignas(64) std::atomic<uint64_t> state;
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> occurrence;
  std::atomic<uint64_t> source;  // lane_read's address in this member's process (0: none)
  // Lane calls this member completed. A member's slot may be reused once
  // every member completed the call it was published for.
  alignas(64) std::atomic<uint64_t> completed;
  std::atomic<uint32_t> joined;  // in hvd.join(): it will not come to the lane
  alignas(64) unsigned char data[ShmCommunicator::kLanePayloadBytes];
  // A streamed lane call (lane_stream), tagged with the call's number (the
  // same on every member) in the upper 32 bits: chunks this member wrote to
  // the ring, and chunks it has copied out of every writer's part of it.
  alignas(64) std::atomic<uint64_t> stream_written;
  alignas(64) std::atomic<uint64_t> stream_consumed;
  // A large lane call read out of the writers' processes (lane_read):
  // tagged like the stream's counts, 1 when this member read what it
  // receives, 2 when it could not.
  alignas(64) std::atomic<uint64_t> read_status;
  // When this member began and finished receiving the last large lane
  // broadcast or allgather (steady clock, which all processes share): the
  // deciding member's timing (lane_move).
  std::atomic<int64_t> receive_began;
  std::atomic<int64_t> received_at;
};

namespace {

size_t members_offset() { return align_up(sizeof(ShmArenaHeader), 64); }
size_t data_offset(int size) { return align_up(members_offset() + sizeof(ShmMemberState) * size, 4096); }
size_t lane_offset(int size, size_t slot_bytes) {
  return align_up(data_offset(size) + slot_bytes * (2 * static_cast<size_t>(size) + 2), 64);
}
size_t ring_offset(int size, size_t slot_bytes) {
  return align_up(lane_offset(size, slot_bytes) + sizeof(ShmCommunicator::LaneArea) * static_cast<size_t>(size), 4096);
}
ShmMemberState* member_states(ShmArenaHeader* h) {
  return reinterpret_cast<ShmMemberState*>(reinterpret_cast<unsigned char*>(h) + members_offset());
}

constexpr size_t kArenaNameHexDigits = 40;  // "/hvd-" + 40 hex digits, see the constructor

bool is_arena_name(const char* name) {
  if (std::strncmp(name, "hvd-", 4) != 0 || std::strlen(name) != 4 + kArenaNameHexDigits) return false;
  for (const char* c = name + 4; *c != '\0'; ++c) {
    if (!std::isxdigit(static_cast<unsigned char>(*c))) return false;
  }
  return true;
}

// Whether the arena `name` (in /dev/shm, ours) is left over from a job that
// is gone: its header is complete and every member that recorded itself did
// so in this PID namespace and is no longer alive. Anything we cannot judge
// (another namespace, a header not written yet) is kept.
bool arena_is_stale(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return false;
  struct stat st;
  bool ours = fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
              static_cast<size_t>(st.st_size) >= members_offset() + sizeof(ShmMemberState);
  void* mem = ours ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (mem == MAP_FAILED) return false;
  const auto* header = static_cast<const ShmArenaHeader*>(mem);
  bool stale = header->magic == kArenaMagic && header->size > 0 &&
               data_offset(static_cast<int>(header->size)) <= static_cast<size_t>(st.st_size);
  if (stale) {
    const uint64_t namespace_id = pid_namespace_id();
    const auto* members = reinterpret_cast<const ShmMemberState*>(static_cast<const unsigned char*>(mem) +
                                                                  members_offset());
    int recorded = 0;
    for (uint32_t m = 0; m < header->size && stale; ++m) {
      int32_t pid = members[m].pid.load();
      if (pid == 0) continue;  // never attached
      ++recorded;
      stale = namespace_id != 0 && members[m].pid_namespace.load() == namespace_id && !process_alive(pid);
    }
    stale = stale && recorded > 0;
  }
  munmap(mem, static_cast<size_t>(st.st_size));
  return stale;
}

}  // namespace

int reclaim_stale_arenas() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    if (is_arena_name(entry->d_name) && arena_is_stale(std::string("/") + entry->d_name)) {
      stale.push_back(std::string("/") + entry->d_name);
    }
  }
  closedir(dir);
  for (const auto& name : stale) {
    if (shm_unlink(name.c_str()) == 0) HVD_LOG(kInfo, "shm: removed " << name << ", left by a job that is gone");
  }
  return static_cast<int>(stale.size());
}

ShmCommunicator::ShmCommunicator(const CommOptions& options, Store& store) : options_(options) {
  rank_ = options.rank;
  size_ = static_cast<int>(options.global_ranks.size());
  if (size_ == 0) size_ = 1;
  // The engine decides for the whole machine (ranks of this job in other
  // namespaces compete for the same CPUs); alone, count the members.
  spin_ = options.spin.value_or(static_cast<unsigned>(size_) <= usable_cpus());
  slot_bytes_ = slot_bytes_from_env(spin_);
  chunk_bytes_ = slot_bytes_;
  if (size_ == 1) return;  // nothing to share

  arena_bytes_ = ring_offset(size_, slot_bytes_) + kLaneRingBytes;
  // The key embeds secret-derived material, so its hash is an unguessable name.
  shm_name_ = "/hvd-" + to_hex(sha256(options.key.data(), options.key.size())).substr(0, 40);
  const std::string& name = shm_name_;
  double rendezvous_timeout = std::max(options.timeout_seconds, 10.0);
  int fd = -1;
  if (rank_ == 0) {
    // A job whose member 0 was killed before every member attached leaves its
    // arena's name behind (~1.5 MB each, in a /dev/shm that may hold 64 MiB).
    reclaim_stale_arenas();
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      // Left behind by a crashed earlier run with the same key.
      shm_unlink(name.c_str());
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
      throw_error(ErrorCode::kInternal, "shm: cannot create shared-memory arena: " +
                                            std::string(std::strerror(errno)) +
                                            " (set HOROVOD_SHM_DISABLE=1 to use TCP instead)");
    }
    // posix_fallocate reserves the pages now, so a full /dev/shm (64 MiB in
    // a default container) is a clear error here instead of SIGBUS later.
    int err = posix_fallocate(fd, 0, static_cast<off_t>(arena_bytes_));
    if (err == EOPNOTSUPP || err == EINVAL) {
      err = ftruncate(fd, static_cast<off_t>(arena_bytes_)) == 0 ? 0 : errno;
    }
    if (err != 0) {
      ::close(fd);
      shm_unlink(name.c_str());
      throw_error(ErrorCode::kInternal, "shm: cannot size the arena to " + std::to_string(arena_bytes_) +
                                            " bytes: " + std::strerror(err) +
                                            " (is /dev/shm large enough? HOROVOD_SHM_DISABLE=1 avoids it)");
    }
  } else {
    try {
      store.get_interruptible(options.key + "/shm/ready", rendezvous_timeout, options.interrupt);
    } catch (...) {
      // Member 0 died (or is hopelessly late) between creating the arena and
      // announcing it: nobody else would remove the name, and this job can
      // no longer use it. Its mappings, if member 0 still runs, stay valid.
      shm_unlink(name.c_str());
      throw;
    }
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      throw_error(ErrorCode::kInternal, "shm: cannot open the arena created by member 0 (global rank " +
                                            std::to_string(options.global_ranks[0]) + "): " +
                                            std::strerror(errno));
    }
  }
  void* mem = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (mem == MAP_FAILED) {
    if (rank_ == 0) shm_unlink(name.c_str());
    throw_error(ErrorCode::kInternal, std::string("shm: cannot map the arena: ") + std::strerror(map_errno));
  }
  arena_ = static_cast<unsigned char*>(mem);
  header_ = reinterpret_cast<ShmArenaHeader*>(arena_);
  if (rank_ == 0) {
    new (header_) ShmArenaHeader();
    header_->magic = kArenaMagic;
    header_->size = static_cast<uint32_t>(size_);
    header_->slot_bytes = static_cast<uint32_t>(slot_bytes_);
    // Internal switch for tests and A/B measurements. "deny-for-tests":
    // every member but 0 acts as if reading another process's memory were
    // forbidden (as seccomp or ptrace restrictions make it in some containers).
    const char* single_copy = std::getenv("HVD_SHM_SINGLE_COPY");
    header_->single_copy = single_copy == nullptr || std::strcmp(single_copy, "auto") == 0 ? 3
                           : std::strcmp(single_copy, "0") == 0                                 ? 0
                           : std::strcmp(single_copy, "deny-for-tests") == 0                  ? 2
                                                                                                : 1;
    header_->allreduce_routes.store(0, std::memory_order_relaxed);
    header_->allreduce_streams.store(0, std::memory_order_relaxed);
    header_->allreduce_chunk_ways.store(0, std::memory_order_relaxed);
    header_->members_spin = spin_ ? 1 : 0;
    ShmMemberState* members = member_states(header_);
    for (int m = 0; m < size_; ++m) new (&members[m]) ShmMemberState();
    for (int m = 0; m < size_; ++m) new (lane(m)) LaneArea();
  } else if (header_->magic != kArenaMagic || header_->size != static_cast<uint32_t>(size_) ||
             header_->slot_bytes != slot_bytes_) {
    munmap(arena_, arena_bytes_);
    throw_error(ErrorCode::kInternal, "shm: the arena for '" + options.key +
                                          "' does not match this communicator (different member count or "
                                          "HVD_SHM_SLOT_BYTES on member 0)");
  }
  single_copy_ = header_->single_copy != 0;
  single_copy_allreduce_ = header_->members_spin != 0;
  if (const char* chunk = std::getenv("HVD_SHM_CHUNK")) {  // for tests and measurements
    chunk_fixed_ = std::strcmp(chunk, "slot") == 0 ? 0 : std::strcmp(chunk, "small") == 0 ? 1 : -1;
  }
  single_copy_timed_ = header_->single_copy == 3;
  if (const char* stream = std::getenv("HVD_SHM_STREAM")) {  // for measurements: 1 always, 0 never
    stream_timed_ = std::strcmp(stream, "0") != 0 && std::strcmp(stream, "1") != 0;
    stream_always_ = std::strcmp(stream, "1") == 0;
  }
  if (const char* route = std::getenv("HVD_SHM_LANE_BROADCAST")) {
    lane_route_ = std::strcmp(route, "stream") == 0 ? LaneRoute::kStream
                  : std::strcmp(route, "read") == 0 ? LaneRoute::kRead
                                                    : LaneRoute::kAdaptive;
  }
  lane_seen_.resize(static_cast<size_t>(size_));
  lane_inputs_.resize(static_cast<size_t>(size_));
  lane_read_.resize(static_cast<size_t>(size_));
  single_copy_sources_.resize(static_cast<size_t>(size_));
  deny_single_copy_ = header_->single_copy == 2 && rank_ != 0;
  member_states(header_)[rank_].pid_namespace.store(pid_namespace_id());
  member_states(header_)[rank_].pid.store(static_cast<int32_t>(getpid()));
  if (rank_ == 0) {
    store.set(options.key + "/shm/ready", "1");
  } else if (store.add(options.key + "/shm/attached", 1) == size_ - 1) {
    // Everyone has it mapped: remove the name now so a crash leaks nothing.
    shm_unlink(name.c_str());
  }
}

ShmCommunicator::~ShmCommunicator() {
  if (header_ != nullptr) {
    // Members still waiting for us see this and fail instead of timing out.
    member_states(header_)[rank_].departed.store(1);
    futex_wake_all(&header_->generation);
    munmap(arena_, arena_bytes_);
    // Normally the last member to attach already removed the name; this
    // covers a member that never attached (ENOENT otherwise, harmless).
    if (rank_ == 0) shm_unlink(shm_name_.c_str());
  }
}

std::string ShmCommunicator::member_name(int member) const {
  std::string s = "member " + std::to_string(member);
  if (member < static_cast<int>(options_.global_ranks.size())) {
    s += " (global rank " + std::to_string(options_.global_ranks[member]) + ")";
  }
  return s;
}

void ShmCommunicator::fail(const char* op, const std::string& what) {
  std::string message = std::string("shm ") + op + " on " + member_name(rank_) + ": " + what;
  // A failed collective leaves the members out of step for good: poison the
  // arena so every other member fails now instead of at its own timeout.
  if (header_ != nullptr && header_->aborted_by.load() == 0) abort(message);
  local_abort_.store(true);
  throw_error(ErrorCode::kInternal, message);
}

unsigned char* ShmCommunicator::slot(int buffer, int member) const {
  return arena_ + data_offset(size_) + (static_cast<size_t>(buffer) * size_ + member) * slot_bytes_;
}

unsigned char* ShmCommunicator::result(int buffer) const {
  return arena_ + data_offset(size_) + (2 * static_cast<size_t>(size_) + buffer) * slot_bytes_;
}

void ShmCommunicator::abort(const std::string& reason) {
  local_abort_.store(true);
  if (header_ == nullptr) return;
  ShmMemberState& me = member_states(header_)[rank_];
  size_t n = std::min(reason.size(), kAbortReasonBytes - 1);
  std::memcpy(me.abort_reason, reason.data(), n);
  me.abort_reason[n] = '\0';
  uint32_t expected = 0;
  header_->aborted_by.compare_exchange_strong(expected, static_cast<uint32_t>(rank_ + 1));
  futex_wake_all(&header_->generation);
}

void ShmCommunicator::check_abort(const char* op) {
  if (header_ == nullptr) {
    if (local_abort_.load()) fail(op, "the communicator was aborted");
    return;
  }
  uint32_t by = header_->aborted_by.load(std::memory_order_acquire);
  if (by != 0) {
    int member = static_cast<int>(by) - 1;
    fail(op, "aborted by " + member_name(member) + ": " + member_states(header_)[member].abort_reason);
  }
  if (local_abort_.load()) fail(op, "the communicator was aborted");
}

void ShmCommunicator::check_peers(uint64_t target_step, const char* op) {
  ShmMemberState* members = member_states(header_);
  for (int m = 0; m < size_; ++m) {
    if (m == rank_ || members[m].arrived_step.load() >= target_step) continue;
    if (members[m].departed.load()) {
      fail(op, member_name(m) + " left the collective (its communicator was destroyed)");
    }
    int pid = members[m].pid.load();
    uint64_t pid_namespace = members[m].pid_namespace.load();
    bool pid_visible = pid != 0 && pid_namespace != 0 && pid_namespace == members[rank_].pid_namespace.load();
    if (pid_visible && !process_alive(pid)) {
      fail(op, member_name(m) + ", pid " + std::to_string(pid) + ", died");
    }
  }
}

void ShmCommunicator::wait_for_generation(uint32_t generation, uint64_t target_step, const char* op) {
  std::atomic<uint32_t>& current = header_->generation;
  Clock::time_point start = Clock::now();
  if (spin_) {
    Clock::time_point spin_end = start + spin_budget_;
    const Clock::time_point yield_from = start + kSpinBeforeYield;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (current.load(std::memory_order_acquire) != generation) return;
        cpu_pause();
      }
      Clock::time_point now = Clock::now();
      if (now > spin_end) break;
      if (now > yield_from) sched_yield();
    }
  } else {
    // More members than CPUs: the member we wait for may need our CPU, so
    // hand it over instead of spinning; still far cheaper than a futex sleep
    // and wake-up when the other members arrive within a few time slices.
    Clock::time_point yield_end = start + kYieldTime;
    while (Clock::now() < yield_end) {
      if (current.load(std::memory_order_acquire) != generation) return;
      sched_yield();
    }
  }
  // Adapt the spin budget to how long waits really take: if the peers came
  // soon after we gave up, spin that long next time; if they took far
  // longer (a descheduled peer on a busy machine), spinning only steals
  // their CPU, so spin less.
  struct SpinTuner {
    ShmCommunicator* self;
    Clock::time_point start;
    ~SpinTuner() {
      if (!self->spin_) return;
      auto waited = Clock::now() - start;
      if (waited <= kSpinTime) {
        self->spin_budget_ = std::min<Clock::duration>(kSpinTime, std::max(self->spin_budget_, waited * 2));
      } else {
        self->spin_budget_ = std::max<Clock::duration>(kMinSpinTime, self->spin_budget_ / 2);
      }
    }
  } tuner{this, start};
  Clock::time_point last_peer_check = start;
  auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeout_seconds));
  for (;;) {
    if (current.load(std::memory_order_acquire) != generation) return;
    check_abort(op);
    header_->sleepers.fetch_add(1);
    if (current.load() == generation) futex_wait(&current, generation, kFutexSlice);
    header_->sleepers.fetch_sub(1);
    if (current.load(std::memory_order_acquire) != generation) return;
    Clock::time_point now = Clock::now();
    if (now - last_peer_check >= kPeerCheckInterval) {
      last_peer_check = now;
      check_peers(target_step, op);
    }
    if (now - start > timeout) {
      std::string missing;
      ShmMemberState* members = member_states(header_);
      for (int m = 0; m < size_; ++m) {
        if (members[m].arrived_step.load() < target_step) missing += (missing.empty() ? "" : ", ") + member_name(m);
      }
      fail(op, "no progress for " + std::to_string(options_.timeout_seconds) + " s waiting for " +
                   (missing.empty() ? std::string("the other members") : missing));
    }
  }
}

void ShmCommunicator::step_barrier(const char* op) {
  uint32_t generation = header_->generation.load(std::memory_order_acquire);
  uint64_t target = ++step_;
  member_states(header_)[rank_].arrived_step.store(target, std::memory_order_relaxed);
  uint32_t before = header_->arrived_count.fetch_add(1, std::memory_order_acq_rel);
  if (before == static_cast<uint32_t>(size_ - 1)) {
    // Last to arrive: reset for the next step before releasing everyone.
    header_->arrived_count.store(0, std::memory_order_relaxed);
    header_->generation.fetch_add(1, std::memory_order_seq_cst);
    if (header_->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&header_->generation);
    return;
  }
  wait_for_generation(generation, target, op);
}

size_t ShmCommunicator::max_over_members(size_t value) {
  int buffer = static_cast<int>(step_ & 1);
  ShmMemberState* members = member_states(header_);
  members[rank_].scratch[buffer].store(value, std::memory_order_relaxed);
  step_barrier("alltoallv");
  size_t out = 0;
  for (int m = 0; m < size_; ++m) out = std::max<size_t>(out, members[m].scratch[buffer].load(std::memory_order_relaxed));
  return out;
}

void ShmCommunicator::barrier() {
  check_abort("barrier");
  if (size_ == 1) return;
  step_barrier("barrier");
}

class ShmCommunicator::Packed {
 public:
  Packed(const void* data, size_t count)
      : one_{static_cast<unsigned char*>(const_cast<void*>(data)), 0, count}, parts_(&one_), num_parts_(1) {}
  explicit Packed(const std::vector<ArrayPart>& parts) : parts_(parts.data()), num_parts_(parts.size()) {}
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;

  // f(address of element from + done, done, run) for each run of elements
  // [from, from + n) that lies in one part.
  template <class F>
  void runs(size_t from, size_t n, size_t esize, F&& f) const {
    if (n == 0) return;
    const ArrayPart* part =
        std::upper_bound(parts_, parts_ + num_parts_, from,
                         [](size_t element, const ArrayPart& p) { return element < p.first; }) - 1;
    for (size_t done = 0; done < n; ++part) {
      const size_t at = from + done - part->first;
      const size_t run = std::min(n - done, part->count - at);
      f(part->data + at * esize, done, run);
      done += run;
    }
  }
  void read(void* dst, size_t from, size_t n, size_t esize, void (*copy)(void*, const void*, size_t) = shm_copy) const {
    runs(from, n, esize, [&](const unsigned char* src, size_t done, size_t run) {
      copy(static_cast<unsigned char*>(dst) + done * esize, src, run * esize);
    });
  }
  void write(size_t from, const void* src, size_t n, size_t esize) const {
    runs(from, n, esize, [&](unsigned char* dst, size_t done, size_t run) {
      shm_copy(dst, static_cast<const unsigned char*>(src) + done * esize, run * esize);
    });
  }
  const ArrayPart* parts() const { return parts_; }
  size_t num_parts() const { return num_parts_; }

 private:
  ArrayPart one_{};
  const ArrayPart* parts_;
  size_t num_parts_;
};

void ShmCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  allreduce_scaled(data, data, count, dtype, op, 1.0);
}

bool ShmCommunicator::allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) {
  return allreduce_scaled(in, out, count, dtype, op, 1.0);
}

// Out of place costs what in place does: the input is read where in place
// would read `data`, the result written where it would write it. Scaling
// where each member reduces its share saves a pass over the whole result:
// at P=2 that pass made an Average 19-27 % slower than a Sum at 4-16 MiB
// and 62-68 % at 64 MiB (docs/benchmarks.md).
bool ShmCommunicator::allreduce_scaled(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                       double scale) {
  check_abort("allreduce");
  if (count == 0) return true;
  if (size_ == 1) {
    if (in != out) std::memmove(out, in, count * dtype_size(dtype));
    if (dtype == DataType::kBool) {
      const void* srcs[1] = {out};
      reduce_many(out, srcs, 1, count, dtype, op);  // canonical 0/1
    }
    if (scale != 1.0) scale_buffer(out, count, dtype, scale);
    return true;
  }
  size_t bytes = count * dtype_size(dtype);
  if (bytes <= kSmallAllreduceBytes && bytes <= slot_bytes_) {
    allreduce_small(in, out, count, dtype, op, scale);
  } else {
    allreduce_large(Packed(in, count), Packed(out, count), count, dtype, op, scale);
  }
  return true;
}

void ShmCommunicator::allreduce_large(const Packed& in, const Packed& out, size_t count, DataType dtype, ReduceOp op,
                                      double scale) {
  const size_t bytes = count * dtype_size(dtype);
  const Clock::time_point began = Clock::now();
  const int route = allreduce_route(bytes);
  if (!(route > 0 && allreduce_single_copy(in, out, count, dtype, op, scale))) {
    allreduce_pipelined(in, out, count, dtype, op, scale, route < 0);
  }
  if (rank_ == 0 && route >= 0 && single_copy_timed_) {
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - began).count();
    allreduce_route_times_[allreduce_size_class(bytes)].record(route > 0, std::max(1e-3, ns / bytes));
  }
}

size_t ShmCommunicator::allreduce_size_class(size_t bytes) {
  static_assert(kSingleCopyAllreduceMaxBytes == kSingleCopyAllreduceMinBytes << kAllreduceSizeClasses);
  return power_of_two_class(bytes, kSingleCopyAllreduceMinBytes, kAllreduceSizeClasses);
}

bool ShmCommunicator::single_copy_may_take(size_t bytes) const {
  return single_copy_ && single_copy_allreduce_ && bytes >= kSingleCopyAllreduceMinBytes &&
         bytes < kSingleCopyAllreduceMaxBytes;
}

int ShmCommunicator::allreduce_route(size_t bytes) {
  if (!single_copy_may_take(bytes)) return -1;
  if (!single_copy_timed_) return 1;
  // Member 0's choice, published a call ahead (published_way).
  const size_t c = allreduce_size_class(bytes);
  const uint64_t call = allreduce_route_calls_[c]++;
  const int single = published_way(header_->allreduce_routes, 1, c, call);
  if (rank_ == 0) {
    publish_next_way(header_->allreduce_routes, 1, c, call,
                     allreduce_route_times_[c].next(TimedChoice::kSamples, kRouteRetryEvery));
  }
  return single;
}

// Member m reduces share m of the whole array, reading the other members'
// share m straight out of their inputs (reduce-scatter), then reads every
// other member's reduced share out of its output (allgather). An array may
// lie in parts of several buffers (a fused allreduce reduced where its
// tensors lie), and each member's parts are its own: every member publishes
// where its lists of parts are, and the others read the lists, then the
// runs of the array they need, out of its process.
//
// Why this is safe in place (in == out on some or all members): in phase 1
// member m writes only share m of its own array, and reads only share m of
// the others', which they do not write in phase 1 (each writes its own
// share); its own share m it reads only itself, as the first source of the
// reduction, which reduce_many allows to alias the destination. Phase 2
// writes every other share of our array; the others read those shares of
// our input in phase 1, hence the barrier between the phases. In phase 2
// member m reads share p of member p's output, which p never writes in
// phase 2; the last barrier keeps it unchanged (and allocated) until every
// member has read it. The lists of parts live in the members' own memory
// until the call returns.
bool ShmCommunicator::allreduce_single_copy(const Packed& in, const Packed& out, size_t count, DataType dtype,
                                            ReduceOp op, double scale) {
  ShmMemberState* members = member_states(header_);
  ShmMemberState& self = members[rank_];
  self.single_copy_input.store(reinterpret_cast<uint64_t>(in.parts()), std::memory_order_relaxed);
  self.single_copy_input_parts.store(in.num_parts(), std::memory_order_relaxed);
  self.single_copy_output.store(reinterpret_cast<uint64_t>(out.parts()), std::memory_order_relaxed);
  self.single_copy_output_parts.store(out.num_parts(), std::memory_order_relaxed);
  step_barrier("allreduce");
  // The others' lists of parts. On the first call reading them is also the
  // test of whether we may read the others' memory at all, made before
  // anyone writes its output: in place, a member that had reduced its share
  // could not fall back to the slots (its input would be gone).
  std::vector<std::vector<ArrayPart>>& lists = single_copy_lists_;
  lists.resize(2 * static_cast<size_t>(size_));
  int error = 0, failed = -1;
  for (int m = 0; m < size_ && error == 0; ++m) {
    if (m == rank_) continue;
    const ShmMemberState& member = members[m];
    for (int output = 0; output < 2; ++output) {  // both lists in one read
      std::vector<ArrayPart>& list = lists[2 * m + output];
      list.resize((output ? member.single_copy_output_parts : member.single_copy_input_parts).load());
      const uint64_t at = (output ? member.single_copy_output : member.single_copy_input).load();
      add_iovecs(reinterpret_cast<unsigned char*>(list.data()), reinterpret_cast<const unsigned char*>(at),
                 list.size() * sizeof(ArrayPart));
    }
    error = read_member_iovecs(m);
    failed = m;
  }
  // After the test a read can only fail when a member died or left (or on a
  // bug): we may already have written our output, so there is no falling
  // back; fail, which stops every member.
  auto fail_reading = [&](int member, int error) {
    check_peers(UINT64_MAX, "allreduce");  // the usual error for a dead or departed member
    fail("allreduce", "cannot read the buffer of " + member_name(member) + " (" + std::strerror(error) + ")");
  };
  if (!single_copy_proven_) {
    if (!agree_on_single_copy(error, "allreduce")) return false;
    // Not set by a successful allgather: there a member reads nothing from
    // members whose pieces are empty, which proves nothing.
    single_copy_proven_ = true;
  } else if (error != 0) {
    fail_reading(failed, error);
  }
  auto read_or_fail = [&](int member) {
    const int error = read_member_iovecs(member);
    if (error != 0) fail_reading(member, error);
  };
  const size_t esize = dtype_size(dtype);
  // Shares start on cache lines, like the slots' (allreduce_pipelined).
  const size_t share_elems = align_up((count + size_ - 1) / size_, std::max<size_t>(1, 64 / esize));
  auto share_begin = [&](int member) { return std::min(count, share_elems * static_cast<size_t>(member)); };
  auto share_end = [&](int member) { return std::min(count, share_begin(member) + share_elems); };

  const size_t chunk_elems = std::max<size_t>(1, kSingleCopyReduceChunkBytes / esize);
  const size_t chunk_bytes = chunk_elems * esize;
  if (single_copy_scratch_.size() < chunk_bytes * (size_ - 1)) single_copy_scratch_.resize(chunk_bytes * (size_ - 1));
  std::vector<const void*>& srcs = single_copy_sources_;
  for (size_t first = share_begin(rank_); first < share_end(rank_); first += chunk_elems) {
    const size_t n = std::min(chunk_elems, share_end(rank_) - first);
    unsigned char* scratch = single_copy_scratch_.data();
    for (int m = 0; m < size_; ++m) {
      if (m == rank_) continue;
      Packed(lists[2 * m]).runs(first, n, esize, [&](const unsigned char* src, size_t done, size_t run) {
        add_iovecs(scratch + done * esize, src, run * esize);
      });
      read_or_fail(m);
      scratch += chunk_bytes;
    }
    // Runs that lie in one part of `out` and one of `in` (dst may alias
    // srcs[0]); our own input first, then the others in member order: the
    // order allreduce_pipelined reduces in.
    out.runs(first, n, esize, [&](unsigned char* dst, size_t out_done, size_t out_run) {
      in.runs(first + out_done, out_run, esize, [&](const unsigned char* src, size_t in_done, size_t run) {
        const size_t at = (out_done + in_done) * esize;  // in each other member's scratch
        srcs[0] = src;
        for (int k = 1; k < size_; ++k) srcs[k] = single_copy_scratch_.data() + (k - 1) * chunk_bytes + at;
        reduce_many_scaled(dst + in_done * esize, srcs.data(), size_, run, dtype, op, scale);
      });
    });
  }
  step_barrier("allreduce");
  for (int m = 0; m < size_; ++m) {
    if (m == rank_ || share_end(m) <= share_begin(m)) continue;
    const size_t from = share_begin(m), n = share_end(m) - from;
    const Packed theirs(lists[2 * m + 1]);
    out.runs(from, n, esize, [&](unsigned char* dst, size_t out_done, size_t out_run) {
      theirs.runs(from + out_done, out_run, esize, [&](const unsigned char* src, size_t done, size_t run) {
        add_iovecs(dst + done * esize, src, run * esize);
      });
    });
    read_or_fail(m);
  }
  step_barrier("allreduce");
  ++single_copy_allreduces_;
  return true;
}

void ShmCommunicator::allreduce_small(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                      double scale) {
  size_t bytes = count * dtype_size(dtype);
  int buffer = static_cast<int>(step_ & 1);
  shm_copy(slot(buffer, rank_), in, bytes);
  step_barrier("allreduce");
  const void* srcs[64];
  std::vector<const void*> many;
  const void** src_list = srcs;
  if (size_ > 64) {
    many.resize(size_);
    src_list = many.data();
  }
  for (int m = 0; m < size_; ++m) src_list[m] = slot(buffer, m);
  reduce_many_scaled(out, src_list, size_, count, dtype, op, scale);
}

// An allreduce the single copy may take goes in one piece, so that the
// single copy can read it where its tensors lie.
size_t ShmCommunicator::fused_piece_bytes(size_t bytes) const {
  if (size_ == 1) return 0;
  return single_copy_may_take(bytes) ? bytes : kFusedPieceBytes;
}

// A chunk is at least a page and at most a slot; every member holds the same
// value (see Communicator::set_pipeline_chunk_bytes).

void ShmCommunicator::set_pipeline_chunk_bytes(size_t bytes) {
  chunk_bytes_ = bytes == 0 ? slot_bytes_ : std::clamp<size_t>(align_up(bytes, 4096), 4096, slot_bytes_);
}

// A fused allreduce's piece straight from the tensors and into them: the
// packing and unpacking copies were a third of the engine's time in the
// training benchmark's grouped allreduce.
bool ShmCommunicator::allreduces_parts(size_t bytes) const {
  // The sizes allreduce_scaled gives the slots or the single copy, which
  // read and write the array a run at a time; the small path needs it in
  // one buffer.
  return size_ > 1 && !(bytes <= kSmallAllreduceBytes && bytes <= slot_bytes_);
}

void ShmCommunicator::allreduce_parts(const std::vector<ArrayPart>& in, const std::vector<ArrayPart>& out,
                                      size_t count, DataType dtype, ReduceOp op, double scale) {
  check_abort("allreduce");
  if (!allreduces_parts(count * dtype_size(dtype))) Communicator::allreduce_parts(in, out, count, dtype, op, scale);
  allreduce_large(Packed(in), Packed(out), count, dtype, op, scale);
}

void ShmCommunicator::allreduce_pipelined(const Packed& in, const Packed& out, size_t count, DataType dtype,
                                          ReduceOp op, double scale, bool chunk_timed) {
  const size_t esize = dtype_size(dtype);
  const size_t align_elems = std::max<size_t>(1, 64 / esize);  // shares start on cache lines
  // What the others read of ours (our slot, our reduced share) is written
  // either into our cache or, streamed, to memory (allreduce_streamed).
  const size_t bytes = count * esize;
  const int chunk_way = chunk_timed ? allreduce_chunk_way(bytes) : -1;
  const bool small_chunks = chunk_way >= 0 && (chunk_way & 2) != 0;
  const size_t chunk_bytes = small_chunks ? small_chunk_bytes() : chunk_bytes_;
  small_chunk_allreduces_ += small_chunks ? 1 : 0;
  const bool streamed = chunk_way < 0 ? allreduce_streamed(bytes)
                        : stream_timed_ ? (chunk_way & 1) != 0
                                        : stream_always_;
  const bool timed = rank_ == 0 && (chunk_way >= 0 || stream_timed_);
  const Clock::time_point began = timed ? Clock::now() : Clock::time_point{};
  void (*const to_arena)(void*, const void*, size_t) = streamed ? shm_stream_copy : shm_copy;
  const size_t chunk_elems = chunk_bytes / esize;
  const size_t num_chunks = (count + chunk_elems - 1) / chunk_elems;
  std::vector<const void*> srcs(size_);

  // Member m reduces share m of every chunk. Our own share never goes
  // through the arena: it is reduced from `in` straight into `out` (others
  // only read their shares from our slot), which saves a copy in and a copy
  // out.
  struct Share {
    size_t begin, end;
  };
  auto share_of = [&](size_t elems, int member) {
    size_t share = align_up((elems + size_ - 1) / size_, align_elems);
    size_t begin = std::min(elems, share * member);
    return Share{begin, std::min(elems, begin + share)};
  };
  // The other members' shares of the chunk at `begin`, out of result(buffer).
  auto copy_out_others = [&](int buffer, size_t begin, size_t elems) {
    Share mine = share_of(elems, rank_);
    out.write(begin, result(buffer), mine.begin, esize);
    out.write(begin + mine.end, result(buffer) + mine.end * esize, elems - mine.end, esize);
  };

  int previous_buffer = -1;
  size_t previous_begin = 0, previous_elems = 0;
  for (size_t c = 0; c < num_chunks; ++c) {
    size_t begin = c * chunk_elems;
    size_t elems = std::min(chunk_elems, count - begin);
    int buffer = static_cast<int>(step_ & 1);
    Share mine = share_of(elems, rank_);
    in.read(slot(buffer, rank_), begin, mine.begin, esize, to_arena);
    in.read(slot(buffer, rank_) + mine.end * esize, begin + mine.end, elems - mine.end, esize, to_arena);
    step_barrier("allreduce");
    if (previous_buffer >= 0) copy_out_others(previous_buffer, previous_begin, previous_elems);
    if (mine.end > mine.begin) {
      const size_t first = begin + mine.begin, n = mine.end - mine.begin;
      // Runs that lie in one part of `out` and one of `in` (dst may alias srcs[0]).
      out.runs(first, n, esize, [&](unsigned char* dst, size_t out_done, size_t out_run) {
        in.runs(first + out_done, out_run, esize, [&](const unsigned char* src, size_t in_done, size_t run) {
          const size_t at = (mine.begin + out_done + in_done) * esize;  // in the slots
          srcs[0] = src;
          int next = 1;
          for (int m = 0; m < size_; ++m) {
            if (m != rank_) srcs[next++] = slot(buffer, m) + at;
          }
          reduce_many_scaled(dst + in_done * esize, srcs.data(), size_, run, dtype, op, scale);
        });
      });
      out.read(result(buffer) + mine.begin * esize, first, n, esize, to_arena);
    }
    previous_buffer = buffer;
    previous_begin = begin;
    previous_elems = elems;
  }
  step_barrier("allreduce");
  copy_out_others(previous_buffer, previous_begin, previous_elems);
  if (timed) {
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - began).count();
    if (chunk_way >= 0) {
      chunk_times_[chunk_size_class(bytes)].record(chunk_way, std::max(1e-3, ns / bytes));
    } else {
      stream_times_[stream_size_class(bytes)].record(streamed, std::max(1e-3, ns / bytes));
    }
  }
}

size_t ShmCommunicator::small_chunk_bytes() const {
  return std::max<size_t>(4096, std::min(kSmallChunkBytes, slot_bytes_ / 2 / 4096 * 4096));
}

size_t ShmCommunicator::chunk_size_class(size_t bytes) const {
  return power_of_two_class(bytes, 2 * small_chunk_bytes(), kChunkSizeClasses);
}

int ShmCommunicator::allreduce_chunk_way(size_t bytes) {
  // Not while autotune tries its own chunks (the same on every member), nor
  // where small chunks would be one.
  if (chunk_bytes_ != slot_bytes_ || bytes < 2 * small_chunk_bytes()) return -1;
  const size_t c = chunk_size_class(bytes);
  const uint64_t call = chunk_calls_[c]++;
  const int way = published_way(header_->allreduce_chunk_ways, 2, c, call);
  if (rank_ == 0) {
    int next = chunk_times_[c].next(TimedChoice::kSamples, kRouteRetryEvery);
    if (chunk_fixed_ >= 0) next = (next & 1) | (chunk_fixed_ << 1);
    publish_next_way(header_->allreduce_chunk_ways, 2, c, call, next);
  }
  return way;
}

size_t ShmCommunicator::stream_size_class(size_t bytes) {
  return power_of_two_class(bytes, kSmallAllreduceBytes, kStreamSizeClasses);
}

bool ShmCommunicator::allreduce_streamed(size_t bytes) {
  if (!stream_timed_) return stream_always_;
  // Member 0 times both ways per size class and publishes its choice; the
  // others follow it, a call late at worst (each member's stores are its own
  // business, so members that differ for a call still compute the same).
  const size_t c = stream_size_class(bytes);
  const uint32_t bit = 1u << c;
  if (rank_ != 0) return (header_->allreduce_streams.load(std::memory_order_relaxed) & bit) != 0;
  const bool streamed = stream_times_[c].next(TimedChoice::kSamples, kRouteRetryEvery);
  // Written only when it changes: the others read this line on every call.
  const uint32_t was = header_->allreduce_streams.load(std::memory_order_relaxed);
  if (((was & bit) != 0) != streamed) {
    header_->allreduce_streams.store(streamed ? was | bit : was & ~bit, std::memory_order_relaxed);
  }
  return streamed;
}

void ShmCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                    DataType dtype, ReduceOp op) {
  check_abort("reducescatter");
  if (static_cast<int>(counts.size()) != size_) {
    fail("reducescatter", "counts has " + std::to_string(counts.size()) + " entries for " +
                              std::to_string(size_) + " members");
  }
  const size_t esize = dtype_size(dtype);
  if (size_ == 1) {
    if (counts[0] > 0 && in != out) std::memmove(out, in, counts[0] * esize);
    if (dtype == DataType::kBool && counts[0] > 0) {
      const void* srcs[1] = {out};
      reduce_many(out, srcs, 1, counts[0], dtype, op);
    }
    return;
  }
  // Each slot is split into one piece per destination member; member d
  // reduces piece d from every slot straight into its output.
  const size_t align_elems = std::max<size_t>(1, 64 / esize);
  size_t piece_elems = (slot_bytes_ / size_) / esize / align_elems * align_elems;
  if (piece_elems == 0) piece_elems = 1;
  const size_t piece_bytes = piece_elems * esize;
  size_t max_count = *std::max_element(counts.begin(), counts.end());
  size_t rounds = (max_count + piece_elems - 1) / piece_elems;
  std::vector<size_t> offsets(size_, 0);
  for (int m = 1; m < size_; ++m) offsets[m] = offsets[m - 1] + counts[m - 1];
  const unsigned char* input = static_cast<const unsigned char*>(in);
  unsigned char* output = static_cast<unsigned char*>(out);
  std::vector<const void*> srcs(size_);
  for (size_t r = 0; r < rounds; ++r) {
    int buffer = static_cast<int>(step_ & 1);
    size_t first = r * piece_elems;
    for (int d = 0; d < size_; ++d) {
      if (counts[d] <= first) continue;
      size_t n = std::min(piece_elems, counts[d] - first);
      shm_copy(slot(buffer, rank_) + d * piece_bytes, input + (offsets[d] + first) * esize, n * esize);
    }
    step_barrier("reducescatter");
    if (counts[rank_] > first) {
      size_t n = std::min(piece_elems, counts[rank_] - first);
      for (int m = 0; m < size_; ++m) srcs[m] = slot(buffer, m) + rank_ * piece_bytes;
      reduce_many(output + first * esize, srcs.data(), size_, n, dtype, op);
    }
  }
}

void ShmCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  check_abort("allgatherv");
  if (static_cast<int>(bytes_per_rank.size()) != size_) {
    fail("allgatherv", "bytes_per_rank has " + std::to_string(bytes_per_rank.size()) + " entries for " +
                           std::to_string(size_) + " members");
  }
  std::vector<size_t> offsets(size_, 0);
  for (int m = 1; m < size_; ++m) offsets[m] = offsets[m - 1] + bytes_per_rank[m - 1];
  unsigned char* output = static_cast<unsigned char*>(out);
  const unsigned char* input = static_cast<const unsigned char*>(in);
  if (size_ == 1) {
    if (bytes_per_rank[0] > 0 && in != out) std::memmove(out, in, bytes_per_rank[0]);
    return;
  }
  size_t max_bytes = *std::max_element(bytes_per_rank.begin(), bytes_per_rank.end());
  if (single_copy_ && max_bytes >= kSingleCopyMinBytes &&
      allgatherv_single_copy(input, output, bytes_per_rank, offsets)) {
    return;
  }
  size_t rounds = (max_bytes + slot_bytes_ - 1) / slot_bytes_;
  for (size_t r = 0; r < rounds; ++r) {
    int buffer = static_cast<int>(step_ & 1);
    size_t first = r * slot_bytes_;
    size_t mine = bytes_per_rank[rank_];
    if (mine > first) shm_copy(slot(buffer, rank_), input + first, std::min(slot_bytes_, mine - first));
    step_barrier("allgatherv");
    for (int m = 0; m < size_; ++m) {
      if (bytes_per_rank[m] <= first) continue;
      unsigned char* dst = output + offsets[m] + first;
      size_t n = std::min(slot_bytes_, bytes_per_rank[m] - first);
      // Our own piece may already be in place (in == out + offset).
      if (m == rank_ && dst == input + first) continue;
      shm_copy(dst, slot(buffer, m), n);
    }
  }
}

int ShmCommunicator::read_member_memory(int member, uint64_t remote, unsigned char* dst, size_t bytes) const {
  return move_member_memory(member, remote, dst, bytes, false);
}

int ShmCommunicator::write_member_memory(int member, uint64_t remote, const unsigned char* src, size_t bytes) const {
  // process_vm_writev only reads the local iovec.
  return move_member_memory(member, remote, const_cast<unsigned char*>(src), bytes, true);
}

int ShmCommunicator::member_pid(int member, pid_t* pid) const {
  if (deny_single_copy_) return EPERM;
  ShmMemberState* members = member_states(header_);
  // Every member has attached by the time anyone reads, so every pid is
  // recorded. A pid means something to us only inside our own PID namespace.
  const uint64_t namespace_id = members[rank_].pid_namespace.load();
  if (namespace_id == 0 || members[member].pid_namespace.load() != namespace_id) return ESRCH;
  *pid = members[member].pid.load();
  return 0;
}

void ShmCommunicator::add_iovecs(unsigned char* local, const unsigned char* remote, size_t bytes) {
  if (bytes == 0) return;  // a batch of only empty pairs would read 0 bytes, which means failure
  local_iovecs_.push_back({local, bytes});
  remote_iovecs_.push_back({const_cast<unsigned char*>(remote), bytes});
}

int ShmCommunicator::read_member_iovecs(int member) {
  pid_t pid = 0;
  int error = member_pid(member, &pid);
  // Each pair of iovecs is as long on both sides, so a short read ends
  // inside one pair, where the next read takes up.
  for (size_t i = 0; error == 0 && i < local_iovecs_.size();) {
    const size_t n = std::min<size_t>(local_iovecs_.size() - i, IOV_MAX);
    const ssize_t got = process_vm_readv(pid, &local_iovecs_[i], n, &remote_iovecs_[i], n, 0);
    if (got <= 0) {
      error = got < 0 ? errno : EIO;
      break;
    }
    for (size_t left = static_cast<size_t>(got); left > 0;) {
      const size_t step = std::min(left, local_iovecs_[i].iov_len);
      for (iovec* v : {&local_iovecs_[i], &remote_iovecs_[i]}) {
        v->iov_base = static_cast<unsigned char*>(v->iov_base) + step;
        v->iov_len -= step;
      }
      left -= step;
      if (local_iovecs_[i].iov_len == 0) ++i;
    }
  }
  local_iovecs_.clear();
  remote_iovecs_.clear();
  return error;
}

int ShmCommunicator::move_member_memory(int member, uint64_t remote, unsigned char* local, size_t bytes,
                                        bool write) const {
  pid_t pid = 0;
  if (int error = member_pid(member, &pid); error != 0) return error;
  while (bytes > 0) {
    iovec local_iov{local, bytes};
    iovec remote_iov{reinterpret_cast<void*>(remote), bytes};
    ssize_t got = write ? process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
                        : process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0);
    if (got <= 0) return got < 0 ? errno : EIO;
    local += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

bool ShmCommunicator::agree_on_single_copy(int error, const char* op) {
  ShmMemberState* members = member_states(header_);
  members[rank_].single_copy_failed.store(error == 0 ? 0 : 1, std::memory_order_relaxed);
  step_barrier(op);
  bool any_failed = false;
  for (int m = 0; m < size_; ++m) any_failed |= members[m].single_copy_failed.load(std::memory_order_relaxed) != 0;
  if (!any_failed) return true;
  // Every member sees the same flags, so all of them switch to the slots
  // together, for this call and the rest.
  single_copy_ = false;
  if (error != 0) {
    HVD_LOG(kInfo, "shm: " << member_name(rank_) << " cannot read the other members' memory ("
                           << std::strerror(error) << "); large allgathers and allreduces go through the "
                           << "shared-memory slots");
  }
  return false;
}

bool ShmCommunicator::allgatherv_single_copy(const unsigned char* input, unsigned char* output,
                                             const std::vector<size_t>& bytes_per_rank,
                                             const std::vector<size_t>& offsets) {
  ShmMemberState* members = member_states(header_);
  members[rank_].single_copy_input.store(reinterpret_cast<uint64_t>(input), std::memory_order_relaxed);
  step_barrier("allgatherv");
  int error = 0;
  for (int m = 0; m < size_ && error == 0; ++m) {
    if (m == rank_ || bytes_per_rank[m] == 0) continue;
    error = read_member_memory(m, members[m].single_copy_input.load(std::memory_order_relaxed), output + offsets[m],
                               bytes_per_rank[m]);
  }
  // Our own piece may already be in place (in == out + offset).
  unsigned char* own = output + offsets[rank_];
  if (error == 0 && bytes_per_rank[rank_] > 0 && own != input) std::memcpy(own, input, bytes_per_rank[rank_]);
  // The barrier inside also keeps every piece unchanged and allocated until
  // everyone has read it. On failure the caller rewrites the whole output.
  return agree_on_single_copy(error, "allgatherv");
}

bool ShmCommunicator::broadcast_single_copy(unsigned char* data, size_t bytes, int root) {
  ShmMemberState* members = member_states(header_);
  members[rank_].single_copy_input.store(reinterpret_cast<uint64_t>(data), std::memory_order_relaxed);
  step_barrier("broadcast");
  // One copy per receiving member; shared out so that the root, which
  // would otherwise only wait, copies as much as each of them: the first
  // `head` bytes of every receiver (a page multiple) are the root's to write.
  const size_t head = bytes / static_cast<size_t>(size_) / 4096 * 4096;
  int error = 0;
  if (rank_ == root) {
    for (int m = 0; m < size_ && error == 0 && head > 0; ++m) {
      if (m == root) continue;
      error = write_member_memory(m, members[m].single_copy_input.load(std::memory_order_relaxed), data, head);
    }
  } else {
    const uint64_t source = members[root].single_copy_input.load(std::memory_order_relaxed);
    error = read_member_memory(root, source + head, data + head, bytes - head);
  }
  // The barrier inside keeps every buffer in place, and the root's
  // unchanged, until all copies are done. On failure the slots rewrite
  // every member's buffer.
  return agree_on_single_copy(error, "broadcast");
}

void ShmCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_abort("broadcast");
  if (root < 0 || root >= size_) fail("broadcast", "root " + std::to_string(root) + " is not a member");
  if (size_ == 1 || bytes == 0) return;
  unsigned char* buf = static_cast<unsigned char*>(data);
  if (single_copy_ && bytes >= kSingleCopyBroadcastMinBytes && broadcast_single_copy(buf, bytes, root)) return;
  // The root owns the whole buffer (every member's slot) for each step.
  const size_t region = slot_bytes_ * size_;
  size_t rounds = (bytes + region - 1) / region;
  for (size_t r = 0; r < rounds; ++r) {
    int buffer = static_cast<int>(step_ & 1);
    size_t first = r * region;
    size_t n = std::min(region, bytes - first);
    if (rank_ == root) shm_copy(whole_buffer(buffer), buf + first, n);
    step_barrier("broadcast");
    if (rank_ != root) shm_copy(buf + first, whole_buffer(buffer), n);
  }
}

void ShmCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                const std::vector<size_t>& recv_bytes) {
  check_abort("alltoallv");
  if (static_cast<int>(send_bytes.size()) != size_ || static_cast<int>(recv_bytes.size()) != size_) {
    fail("alltoallv", "send/recv sizes must have one entry per member (" + std::to_string(size_) + ")");
  }
  const unsigned char* input = static_cast<const unsigned char*>(in);
  unsigned char* output = static_cast<unsigned char*>(out);
  if (size_ == 1) {
    if (send_bytes[0] > 0 && in != out) std::memmove(out, in, send_bytes[0]);
    return;
  }
  std::vector<size_t> send_offsets(size_, 0), recv_offsets(size_, 0);
  for (int m = 1; m < size_; ++m) {
    send_offsets[m] = send_offsets[m - 1] + send_bytes[m - 1];
    recv_offsets[m] = recv_offsets[m - 1] + recv_bytes[m - 1];
  }
  size_t piece = (slot_bytes_ / size_) / 64 * 64;
  size_t local_max = std::max(*std::max_element(send_bytes.begin(), send_bytes.end()),
                              *std::max_element(recv_bytes.begin(), recv_bytes.end()));
  // Every member must run the same number of rounds.
  size_t global_max = max_over_members(local_max);
  size_t rounds = (global_max + piece - 1) / piece;
  for (size_t r = 0; r < rounds; ++r) {
    int buffer = static_cast<int>(step_ & 1);
    size_t first = r * piece;
    for (int d = 0; d < size_; ++d) {
      if (send_bytes[d] <= first) continue;
      shm_copy(slot(buffer, rank_) + d * piece, input + send_offsets[d] + first,
               std::min(piece, send_bytes[d] - first));
    }
    step_barrier("alltoallv");
    for (int m = 0; m < size_; ++m) {
      if (recv_bytes[m] <= first) continue;
      shm_copy(output + recv_offsets[m] + first, slot(buffer, m) + rank_ * piece,
               std::min(piece, recv_bytes[m] - first));
    }
  }
}


// ---- The fast lane -------------------------------------------------------
//
// A member publishes (key, occurrence, input) and waits for the others to
// publish the same (key, occurrence). Seeing that, it commits; seeing every
// member committed, it reduces the inputs in member order and completes.
// A member that waited `wait` without seeing every member published
// withdraws instead. A slot goes published -> committed or published ->
// withdrawn, never both, so either every member completes the call or none
// does: a member falls back as soon as it sees a withdrawal of the call it
// waits on, or, once committed, a member whose slot has moved on to a new
// publication (which it only does after withdrawing, since completing
// would have required this member to complete first).

ShmCommunicator::LaneArea* ShmCommunicator::lane(int member) const {
  return reinterpret_cast<LaneArea*>(arena_ + lane_offset(size_, slot_bytes_)) + member;
}

void ShmCommunicator::set_lane_joined(bool joined) {
  if (header_ != nullptr) lane(rank_)->joined.store(joined ? 1 : 0, std::memory_order_release);
}

template <typename Ready>
void ShmCommunicator::lane_wait(Ready ready, const char* op, const char* what) {
  if (ready()) return;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_peer_check = start;
  bool yielding = !spin_;
  for (uint64_t polls = 1; !ready(); ++polls) {
    if (!yielding) {
      cpu_pause();
      if ((polls & 63) != 0) continue;
    } else {
      sched_yield();
    }
    const Clock::time_point now = Clock::now();
    yielding = yielding || now - start > kSpinBeforeYield;  // a member this late has most likely lost its CPU
    if (now - last_peer_check < kPeerCheckInterval) continue;
    last_peer_check = now;
    check_abort(op);
    check_peers(UINT64_MAX, op);
    if (now - start > std::chrono::duration<double>(options_.timeout_seconds)) {
      fail(op, "no progress for " + std::to_string(options_.timeout_seconds) + " s: " + what);
    }
  }
}

void ShmCommunicator::lane_slot_free(const char* op) {
  lane_wait(
      [&] {
        for (int m = 0; m < size_; ++m) {
          if (lane(m)->completed.load(std::memory_order_acquire) < lane_completed_) return false;
        }
        return true;
      },
      op, "a member never finished the last lane call");
}

void ShmCommunicator::lane_route_settle() {
  if (lane_route_pending_.bytes == 0) return;
  // Our last lane call was a large one we chose the way for, and every
  // member has received it now (lane_slot_free): it took as long as the
  // slowest receiver, counted from when its data could begin to move
  // (through the ring, not before the writers had begun: the root, or every
  // member).
  const LaneRoutePending& p = lane_route_pending_;
  auto at = [](const std::atomic<int64_t>& t) {
    return Clock::time_point(Clock::duration(t.load(std::memory_order_relaxed)));
  };
  Clock::time_point writers_began{};
  for (int m = 0; m < size_; ++m) {
    if (p.root < 0 || m == p.root) writers_began = std::max(writers_began, at(lane(m)->receive_began));
  }
  Clock::duration took{};
  for (int m = 0; m < size_; ++m) {
    if (m == p.root) continue;
    const Clock::time_point began = at(lane(m)->receive_began);
    took = std::max(took, at(lane(m)->received_at) - (p.read ? began : std::max(began, writers_began)));
  }
  const double ns = std::chrono::duration<double, std::nano>(took).count();
  const double per_byte = std::max(1e-3, ns / static_cast<double>(p.bytes));
  lane_route_times_[p.root < 0][lane_size_class(p.bytes)].record(p.read, per_byte);
  lane_route_pending_.bytes = 0;
}

size_t ShmCommunicator::lane_size_class(size_t bytes) {
  size_t c = 0;
  for (size_t b = (bytes - 1) >> 16; b != 0 && c + 1 < kLaneSizeClasses; b >>= 1) ++c;
  return c;
}

bool ShmCommunicator::lane_route_read(size_t bytes, bool allgather) {
  if (lane_read_refused_ || !single_copy_ || lane_route_ == LaneRoute::kStream) return false;
  if (lane_route_ == LaneRoute::kRead) return true;
  // Judged by the best of a run's last calls, because the first ones after
  // a switch find the ring (or the buffers read) cold: a 128 KiB allgather
  // streamed right after reads took 1.5-4x its time in a run of streams,
  // until the ring had been passed once. A run passes the ring twice.
  const uint64_t run = std::max<uint64_t>(TimedChoice::kSamples, 2 * lane_ring_part(allgather) / bytes);
  return lane_route_times_[allgather][lane_size_class(bytes)].next(run, kRouteRetryEvery);
}

void ShmCommunicator::lane_move(const void* input, void* output, size_t bytes, int root, const char* op) {
  const Clock::time_point began = Clock::now();
  const int decider = root >= 0 ? root : 0;
  const bool read =
      lane(decider)->source.load(std::memory_order_relaxed) != 0 && lane_read(input, output, bytes, root, op);
  if (!read) lane_stream(input, output, bytes, root, op);
  LaneArea* mine = lane(rank_);
  mine->receive_began.store(began.time_since_epoch().count(), std::memory_order_relaxed);
  mine->received_at.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  if (rank_ == decider) lane_route_pending_ = {began, bytes, root, read};
}

bool ShmCommunicator::lane_read(const void* input, void* output, size_t bytes, int root, const char* op) {
  // Every member committed to this call, so each counts it alike.
  const uint64_t tag = (lane_completed_ + 1) << 32;
  auto* out = static_cast<unsigned char*>(output);
  auto output_of = [&](int writer) { return out + (root < 0 ? static_cast<size_t>(writer) * bytes : 0); };
  int error = 0;
  for (int m = 0; m < size_ && error == 0; ++m) {
    if (m == rank_ || (root >= 0 && m != root)) continue;
    error = read_member_memory(m, lane(m)->source.load(std::memory_order_relaxed), output_of(m), bytes);
    if (error != 0) {
      HVD_LOG(kInfo, "shm: " << member_name(rank_) << " cannot read " << member_name(m) << "'s memory ("
                             << std::strerror(error) << "); large lane calls stream through the arena instead");
    }
  }
  // A writer's own piece, while the others read.
  if ((root < 0 || root == rank_) && output_of(rank_) != input) std::memcpy(output_of(rank_), input, bytes);
  lane(rank_)->read_status.store(tag | (error == 0 ? 1 : 2), std::memory_order_release);
  // No writer's buffer may change until every member has read it; if one
  // could not, every member sees that and the caller streams instead.
  bool all_read = error == 0;
  lane_wait(
      [&] {
        all_read = error == 0;
        for (int m = 0; m < size_; ++m) {
          if (m == rank_) continue;
          const uint64_t v = lane(m)->read_status.load(std::memory_order_acquire);
          if ((v & ~0xffffffffULL) != tag) return false;
          all_read = all_read && (v & 0xffffffffULL) == 1;
        }
        return true;
      },
      op, "a member never said whether it had read the others' buffers");
  if (all_read) ++lane_reads_;
  lane_read_refused_ = lane_read_refused_ || !all_read;
  return all_read;
}

ShmCommunicator::LaneOutcome ShmCommunicator::lane_allreduce(uint64_t key, uint64_t occurrence, const void* input,
                                                             void* reduced, size_t count, DataType dtype, ReduceOp op,
                                                             double scale, Clock::duration wait) {
  return lane_run(key, occurrence, input, count * dtype_size(dtype), wait, "allreduce (fast lane)", [&] {
    std::vector<const void*>& srcs = lane_inputs_;
    for (int m = 0; m < size_; ++m) srcs[static_cast<size_t>(m)] = lane(m)->data;
    reduce_many_scaled(reduced, srcs.data(), srcs.size(), count, dtype, op, scale);
  });
}

ShmCommunicator::LaneOutcome ShmCommunicator::lane_broadcast(uint64_t key, uint64_t occurrence, const void* input,
                                                             void* output, size_t bytes, int root,
                                                             Clock::duration wait) {
  if (root < 0 || root >= size_) return LaneOutcome::kBusy;
  if (bytes > kLanePayloadBytes) {
    if (!lane_streams(bytes, false)) return LaneOutcome::kBusy;
    const bool read = rank_ == root && lane_route_read(bytes, false);
    return lane_run(
        key, occurrence, nullptr, bytes, wait, "broadcast (fast lane)",
        [&] { lane_move(input, output, bytes, root, "broadcast (fast lane)"); },
        read ? reinterpret_cast<uint64_t>(input) : 0);
  }
  // Only the root's payload is read: the others publish the call alone.
  return lane_run(key, occurrence, rank_ == root ? input : nullptr, bytes, wait, "broadcast (fast lane)", [&] {
    const void* from = rank_ == root ? input : lane(root)->data;
    if (from != output) shm_copy(output, from, bytes);
  });
}

ShmCommunicator::LaneOutcome ShmCommunicator::lane_allgather(uint64_t key, uint64_t occurrence, const void* input,
                                                             void* output, size_t bytes, Clock::duration wait) {
  if (bytes > kLanePayloadBytes) {
    if (!lane_streams(bytes, true)) return LaneOutcome::kBusy;
    // Member 0 chooses the way; the others publish their buffers in case it reads.
    const bool read = rank_ != 0 || lane_route_read(bytes, true);
    return lane_run(
        key, occurrence, nullptr, bytes, wait, "allgather (fast lane)",
        [&] { lane_move(input, output, bytes, -1, "allgather (fast lane)"); },
        read ? reinterpret_cast<uint64_t>(input) : 0);
  }
  return lane_run(key, occurrence, input, bytes, wait, "allgather (fast lane)", [&] {
    auto* out = static_cast<unsigned char*>(output);
    for (int m = 0; m < size_; ++m) {
      shm_copy(out + static_cast<size_t>(m) * bytes, m == rank_ ? input : lane(m)->data, bytes);
    }
  });
}

ShmCommunicator::LaneOutcome ShmCommunicator::lane_reducescatter(uint64_t key, uint64_t occurrence,
                                                                 const void* input, size_t total, void* output,
                                                                 size_t offset, size_t count, DataType dtype,
                                                                 ReduceOp op, Clock::duration wait) {
  const size_t esize = dtype_size(dtype);
  return lane_run(key, occurrence, input, total * esize, wait, "reducescatter (fast lane)", [&] {
    std::vector<const void*>& srcs = lane_inputs_;
    for (int m = 0; m < size_; ++m) srcs[static_cast<size_t>(m)] = lane(m)->data + offset * esize;
    if (count > 0) reduce_many(output, srcs.data(), srcs.size(), count, dtype, op);
  });
}

void ShmCommunicator::lane_stream(const void* input, void* output, size_t bytes, int root, const char* op) {
  // Every member committed to this call, so each counts it alike.
  const uint64_t tag = (lane_completed_ + 1) << 32;
  auto count_of = [tag](uint64_t v) { return (v & ~0xffffffffULL) == tag ? v & 0xffffffffULL : 0; };
  // Each writer's part of the ring, in chunks of at most kLaneChunkBytes.
  const size_t part = lane_ring_part(root < 0);
  // Small payloads in at least four chunks, so that reading overlaps writing.
  const size_t chunk = std::min({kLaneChunkBytes, part / 4, std::max(kLaneMinChunkBytes, align_up(bytes / 4, 64))});
  const uint64_t ring_chunks = part / chunk;
  const uint64_t chunks = (bytes + chunk - 1) / chunk;
  unsigned char* ring = arena_ + ring_offset(size_, slot_bytes_);
  auto at = [&](int writer, uint64_t c) {
    return ring + (root >= 0 ? 0 : static_cast<size_t>(writer) * part) + (lane_ring_cursor_ + c) % ring_chunks * chunk;
  };
  auto chunk_bytes = [&](uint64_t c) { return std::min<size_t>(chunk, bytes - c * chunk); };
  const auto* in = static_cast<const unsigned char*>(input);
  auto* out = static_cast<unsigned char*>(output);
  // Where `writer`'s bytes go.
  auto output_of = [&](int writer) { return out + (root < 0 ? static_cast<size_t>(writer) * bytes : 0); };
  const bool writes = root < 0 || root == rank_;
  LaneArea* mine = lane(rank_);
  uint64_t wrote = writes ? 0 : chunks;
  // Chunks copied out of each writer's part; `consumed`: out of every one's.
  std::vector<uint64_t>& read = lane_read_;
  for (int m = 0; m < size_; ++m) read[m] = m == rank_ || (root >= 0 && m != root) ? chunks : 0;
  uint64_t consumed = *std::min_element(read.begin(), read.end());
  // Since when nothing moved (set at the first look at the clock after something did).
  Clock::time_point since = Clock::now(), last_peer_check = since;
  bool since_set = true, yielding = false;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_seconds));
  while (wrote < chunks || consumed < chunks) {
    bool progress = false;
    // A counter that held this member up, and the value it had: an idle
    // wait polls that one alone, as the barriers poll their word.
    const std::atomic<uint64_t>* watch = nullptr;
    uint64_t watched = 0;
    // Write while every reader has copied out the chunk this one replaces.
    while (wrote < chunks) {
      if (wrote >= ring_chunks) {
        for (int m = 0; m < size_ && watch == nullptr; ++m) {
          const uint64_t v = lane(m)->stream_consumed.load(std::memory_order_acquire);
          if (m != rank_ && count_of(v) + ring_chunks <= wrote) {
            watch = &lane(m)->stream_consumed;
            watched = v;
          }
        }
        if (watch != nullptr) break;
      }
      shm_copy(at(rank_, wrote), in + wrote * chunk, chunk_bytes(wrote));
      mine->stream_written.store(tag | ++wrote, std::memory_order_release);
      progress = true;
    }
    if (consumed < chunks) {
      for (int m = 0; m < size_; ++m) {
        if (read[m] == chunks) continue;
        const uint64_t v = lane(m)->stream_written.load(std::memory_order_acquire);
        const uint64_t ready = count_of(v);
        if (ready == read[m] && watch == nullptr) {
          watch = &lane(m)->stream_written;
          watched = v;
        }
        unsigned char* to = output_of(m);
        for (; read[m] < ready; ++read[m]) shm_copy(to + read[m] * chunk, at(m, read[m]), chunk_bytes(read[m]));
      }
      const uint64_t now_consumed = *std::min_element(read.begin(), read.end());
      if (now_consumed != consumed) {
        consumed = now_consumed;
        mine->stream_consumed.store(tag | consumed, std::memory_order_release);
        progress = true;
      }
    }
    if (progress) {
      since_set = yielding = false;
      continue;
    }
    if (spin_ && !yielding) {
      for (int i = 0; i < 64 && (watch == nullptr || watch->load(std::memory_order_relaxed) == watched); ++i) cpu_pause();
    } else {
      sched_yield();
    }
    const Clock::time_point now = Clock::now();
    if (!since_set) {
      since = now;
      since_set = true;
    }
    yielding = now - since > kSpinBeforeYield;  // a member this late has most likely lost its CPU
    if (now - last_peer_check >= kPeerCheckInterval) {
      last_peer_check = now;
      check_abort(op);
      check_peers(UINT64_MAX, op);
      if (now - since > timeout) {
        fail(op, "no progress for " + std::to_string(options_.timeout_seconds) + " s passing " +
                     std::to_string(bytes) + " bytes through the lane");
      }
    }
  }
  lane_ring_cursor_ += chunks;
  // The writer's own copy, off the readers' critical path.
  if (writes && output_of(rank_) != in) std::memcpy(output_of(rank_), in, bytes);
}

size_t ShmCommunicator::lane_ring_part(bool allgather) const {
  return allgather ? kLaneRingBytes / static_cast<size_t>(size_) / 4096 * 4096 : kLaneRingBytes;
}

bool ShmCommunicator::lane_streams(size_t bytes, bool allgather) const {
  return bytes <= kLaneStreamBytes && lane_ring_part(allgather) >= kLaneMinPartBytes;
}

template <typename Finish>
ShmCommunicator::LaneOutcome ShmCommunicator::lane_run(uint64_t key, uint64_t occurrence, const void* payload,
                                                       size_t bytes, Clock::duration wait, const char* op,
                                                       Finish finish, uint64_t source) {
  if (header_ == nullptr || bytes == 0 || (payload != nullptr && bytes > kLanePayloadBytes)) return LaneOutcome::kBusy;
  if (lane_in_use_.exchange(true, std::memory_order_acquire)) return LaneOutcome::kBusy;
  struct InUse {
    std::atomic<bool>& flag;
    ~InUse() { flag.store(false, std::memory_order_release); }
  } in_use{lane_in_use_};
  if (local_abort_.load() || header_->aborted_by.load(std::memory_order_acquire) != 0) return LaneOutcome::kBusy;
  for (int m = 0; m < size_; ++m) {
    if (lane(m)->joined.load(std::memory_order_acquire) != 0) return LaneOutcome::kBusy;
  }
  lane_slot_free(op);
  lane_route_settle();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + wait;

  LaneArea* mine = lane(rank_);
  const uint64_t publication = ++lane_publication_;
  // A seqlock: the new number (phase empty) goes out before the fields
  // change, so a reader that saw the old number with new fields sees the
  // number change when it reads it again.
  mine->state.store(publication << 2 | kLaneEmpty, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  mine->key.store(key, std::memory_order_relaxed);
  mine->occurrence.store(occurrence, std::memory_order_relaxed);
  mine->source.store(source, std::memory_order_relaxed);
  if (payload != nullptr) shm_copy(mine->data, payload, bytes);
  mine->state.store(publication << 2 | kLanePublished, std::memory_order_release);

  std::vector<uint64_t>& seen = lane_seen_;  // each member's publication we matched
  bool committed = false;
  bool yielding = false;
  Clock::time_point last_peer_check = start;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_seconds));
  auto give_up = [&] {
    mine->state.store(publication << 2 | kLaneWithdrawn, std::memory_order_release);
    return LaneOutcome::kFallback;
  };
  for (uint64_t polls = 0;; ++polls) {
    int matched = 0, done = 0;
    for (int m = 0; m < size_; ++m) {
      if (m == rank_) continue;
      LaneArea* other = lane(m);
      const uint64_t s1 = other->state.load(std::memory_order_acquire);
      if ((s1 & 3) == kLaneEmpty) continue;
      const uint64_t k = other->key.load(std::memory_order_relaxed);
      const uint64_t o = other->occurrence.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint64_t s2 = other->state.load(std::memory_order_relaxed);
      if ((s1 >> 2) != (s2 >> 2)) continue;  // republishing while we read: next pass
      if (committed && (s2 >> 2) != seen[m]) return give_up();  // it withdrew and moved on
      if (k != key || o != occurrence) continue;
      if ((s2 & 3) == kLaneWithdrawn) return give_up();
      seen[m] = s2 >> 2;
      ++matched;
      if ((s2 & 3) == kLaneCommitted) ++done;
    }
    if (!committed && matched == size_ - 1) {
      mine->state.store(publication << 2 | kLaneCommitted, std::memory_order_release);
      committed = true;
      continue;
    }
    if (committed && done == size_ - 1) break;
    if (spin_ && !yielding) {
      cpu_pause();
      if ((polls & 63) != 63) continue;
    } else {
      // Each yield may hand the CPU away for a whole time slice: look at
      // the clock after every one.
      sched_yield();
    }
    const Clock::time_point now = Clock::now();
    // A member this late has most likely lost its CPU (see kSpinBeforeYield).
    yielding = now - start > kSpinBeforeYield;
    if (!committed) {
      if (now > deadline) return give_up();
      continue;
    }
    // Committed: every member published, so the rest commit (or withdraw)
    // within microseconds unless one died or froze in between.
    if (now - last_peer_check >= kPeerCheckInterval) {
      last_peer_check = now;
      check_abort(op);
      check_peers(UINT64_MAX, op);
      if (now - start > timeout) {
        std::string late;
        for (int m = 0; m < size_; ++m) {
          if (m != rank_ && (lane(m)->state.load() & 3) != kLaneCommitted) late += (late.empty() ? "" : ", ") + member_name(m);
        }
        fail(op, "no progress for " + std::to_string(options_.timeout_seconds) + " s: " + late +
                     " showed the call but never committed to it or withdrew");
      }
    }
  }
  finish();
  mine->completed.store(++lane_completed_, std::memory_order_release);
  return LaneOutcome::kDone;
}

}  // namespace hvd
