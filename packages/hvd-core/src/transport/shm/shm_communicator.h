// shm_communicator.h - collectives among processes (or threads) on one host
// through a POSIX shared-memory arena, synchronised with atomics and shared
// futexes inside the arena.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "transport/communicator.h"
#include "transport/shm/timed_choice.h"

namespace hvd {

class Store;
struct ShmArenaHeader;

// Removes the arenas in /dev/shm that this user's jobs left behind (their
// creator was killed before every member attached) and whose members are all
// gone; returns how many. Arenas of live jobs, of other users or of other PID
// namespaces are never touched. Called by member 0 before it creates one.
int reclaim_stale_arenas();

class ShmCommunicator : public Communicator {
 public:
  // Collective over options.hosts' members (all must be on this host).
  // Member 0 creates the arena, the others attach; coordinated via `store`.
  ShmCommunicator(const CommOptions& options, Store& store);
  ~ShmCommunicator() override;

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  bool allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  bool allreduce_scaled(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double scale) override;
  bool allreduces_parts(size_t bytes) const override;
  void allreduce_parts(const std::vector<ArrayPart>& in, const std::vector<ArrayPart>& out, size_t count,
                       DataType dtype, ReduceOp op, double scale) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  void barrier() override;
  void abort(const std::string& reason) override;
  std::string transport_name() const override { return "shm"; }
  size_t pipeline_chunk_default() const override { return size_ > 1 ? slot_bytes_ : 0; }
  void set_pipeline_chunk_bytes(size_t bytes) override;
  size_t fused_piece_bytes(size_t bytes) const override;

  // The same-host fast lane for small synchronous allreduces (docs/core.md,
  // "The fast lane"): every member publishes its (prescaled) input with the
  // key the coordinator gave the tensor and how often that key ran, and
  // waits up to `wait` for the others. When every member published the same
  // (key, occurrence), each reduces all inputs in member order into
  // `reduced` (`count` elements) and it returns kDone. Otherwise nothing was
  // reduced and the caller negotiates the tensor as usual, as the other
  // members do: kFallback when a member withdrew (it waited too long, or saw
  // another call), kBusy when the lane could not be entered (another thread
  // of this process is in it, a member is in hvd.join(), the arena failed).
  // Thread-safe against the collectives above.
  enum class LaneOutcome { kDone, kFallback, kBusy };
  struct LaneArea;  // a member's part of the lane, in the arena
  // As large as the transport's own one-barrier allreduce (every member
  // reduces the whole payload), so a lane call does what a negotiated one
  // would, without the negotiation.
  static constexpr size_t kLanePayloadBytes = 32 * 1024;
  // Broadcasts and allgathers (each member's piece) above kLanePayloadBytes
  // and up to this many bytes also take the lane: once every member has
  // committed to the call, the payload streams through a ring in the arena
  // in chunks the readers copy out as they arrive (lane_stream). Larger ones
  // are negotiated, and from 4 MiB read straight out of the root's (each
  // member's) memory: in the minutes when the AMD EPYC VM's two CPUs are far
  // apart, a 4 MiB stream took 1.8 ms and that read 0.25 ms, while when they
  // are near the stream took 0.13 ms (docs/benchmarks.md).
  static constexpr size_t kLaneStreamBytes = 2 * 1024 * 1024;
  // `reduced` is also multiplied by `scale` (as scale_buffer does).
  LaneOutcome lane_allreduce(uint64_t key, uint64_t occurrence, const void* input, void* reduced, size_t count,
                             DataType dtype, ReduceOp op, double scale, std::chrono::steady_clock::duration wait);
  // The same for a small synchronous broadcast from member `root`: every
  // member ends with root's `bytes` of `input` in `output` (the root copies
  // only when they differ).
  LaneOutcome lane_broadcast(uint64_t key, uint64_t occurrence, const void* input, void* output, size_t bytes,
                             int root, std::chrono::steady_clock::duration wait);
  // The same for a small synchronous allgather of equal pieces: `output`
  // (size() * `bytes`) ends with every member's `bytes` in member order.
  LaneOutcome lane_allgather(uint64_t key, uint64_t occurrence, const void* input, void* output, size_t bytes,
                             std::chrono::steady_clock::duration wait);
  // The same for a small synchronous reducescatter: every member publishes
  // its whole (prescaled) input of `total` elements; each reduces the
  // `count` elements from `offset` of every member's, in member order, into
  // `output`.
  LaneOutcome lane_reducescatter(uint64_t key, uint64_t occurrence, const void* input, size_t total, void* output,
                                 size_t offset, size_t count, DataType dtype, ReduceOp op,
                                 std::chrono::steady_clock::duration wait);
  // This member is in hvd.join(): the others stop waiting for it in the lane.
  void set_lane_joined(bool joined);
  // Large lane broadcasts and allgathers this member took part in that were
  // read out of the writers' processes rather than streamed (tests).
  uint64_t lane_reads() const { return lane_reads_; }
  // Allreduces this member took part in through the single copy (tests).
  uint64_t single_copy_allreduces() const { return single_copy_allreduces_; }
  // Allreduces this member took part in through the slots in small chunks
  // (allreduce_chunk_way; tests).
  uint64_t small_chunk_allreduces() const { return small_chunk_allreduces_; }

 private:
  // Waits until every member has arrived at the next step. Data written into
  // buffer step%2 before the call may be read by everyone afterwards, until
  // they arrive at the following step.
  void step_barrier(const char* op);
  void wait_for_generation(uint32_t generation, uint64_t target_step, const char* op);
  void check_abort(const char* op);
  void check_peers(uint64_t target_step, const char* op);
  [[noreturn]] void fail(const char* op, const std::string& what);
  std::string member_name(int member) const;

  unsigned char* slot(int buffer, int member) const;    // slot_bytes_ per member
  unsigned char* result(int buffer) const;              // slot_bytes_
  unsigned char* whole_buffer(int buffer) const { return slot(buffer, 0); }  // size_ * slot_bytes_
  // The allreduce paths take the factor the result is multiplied by
  // (allreduce_scaled; 1.0: none): each member scales what it reduced
  // before the others read it.
  void allreduce_small(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double scale);
  class Packed;  // the array allreduce_pipelined reads or writes: one buffer, or parts of several
  // `chunk_timed`: the call may take the chunk allreduce_chunk_way says
  // (false where member 0 times this call's route, see allreduce_route).
  void allreduce_pipelined(const Packed& in, const Packed& out, size_t count, DataType dtype, ReduceOp op,
                           double scale, bool chunk_timed);
  size_t max_over_members(size_t value);
  // allgatherv by reading every other member's piece out of its process
  // (process_vm_readv); false, with the output to be rewritten, when some
  // member could not, after which the communicator keeps to the slots.
  bool allgatherv_single_copy(const unsigned char* input, unsigned char* output,
                              const std::vector<size_t>& bytes_per_rank, const std::vector<size_t>& offsets);
  // The root writes the head of its buffer into every other member's
  // process while each of them reads the rest out of the root's; false when
  // a copy was refused somewhere (every member then uses the slots).
  bool broadcast_single_copy(unsigned char* data, size_t bytes, int root);
  // An allreduce above the small path's sizes: through the single copy or
  // the slots (allreduce_route); member 0 records how long it took where it
  // chooses the route by time.
  void allreduce_large(const Packed& in, const Packed& out, size_t count, DataType dtype, ReduceOp op,
                       double scale);
  // allreduce as a reduce-scatter and an allgather that read the other
  // members' input and output out of their processes; false, with nothing
  // written, when some member may not read the others' memory, after which
  // the communicator keeps to the slots.
  bool allreduce_single_copy(const Packed& in, const Packed& out, size_t count, DataType dtype, ReduceOp op,
                             double scale);
  // Copies `bytes` from address `remote` of `member`'s process into `dst`
  // (read_member_memory), or from `src` to there (write_member_memory); 0,
  // or the errno that says why not.
  int read_member_memory(int member, uint64_t remote, unsigned char* dst, size_t bytes) const;
  int write_member_memory(int member, uint64_t remote, const unsigned char* src, size_t bytes) const;
  int move_member_memory(int member, uint64_t remote, unsigned char* local, size_t bytes, bool write) const;
  int member_pid(int member, pid_t* pid) const;  // 0, or the errno that says why we may not read it
  // Queues a copy of `bytes` from address `remote` of some member's process
  // to `local`; read_member_iovecs makes the queued copies from `member`
  // and empties the queue: 0, or the errno that says why not.
  void add_iovecs(unsigned char* local, const unsigned char* remote, size_t bytes);
  int read_member_iovecs(int member);
  // Every member says whether its reads failed (`error`, 0 for none), then
  // a step barrier; true when none did. Otherwise every member turns
  // single-copy collectives off for good, all at the same call.
  bool agree_on_single_copy(int error, const char* op);
  // How an allreduce of `bytes` goes (the same on every member): -1 outside
  // the single copy's window, 1 single copy, 0 the slots; inside the window
  // as member 0 timed the two ways per size class, unless
  // HVD_SHM_SINGLE_COPY fixes it.
  int allreduce_route(size_t bytes);
  bool single_copy_may_take(size_t bytes) const;  // whether allreduce_route may say 1
  static size_t allreduce_size_class(size_t bytes);  // [2 MiB, 4 MiB): 0, each next one twice as large
  // Whether this allreduce of `bytes` through the slots writes what the
  // others read with streaming (non-temporal) stores; see kStreamSizeClasses.
  bool allreduce_streamed(size_t bytes);
  static size_t stream_size_class(size_t bytes);  // [32 KiB, 64 KiB): 0, ...; the last is open-ended
  // How an allreduce of `bytes` through the slots goes, the same chunks on
  // every member: -1 outside the choice (the chunk is chunk_bytes_, the
  // stores as allreduce_streamed says), else a way of kChunkWays as member 0
  // timed them per size class: bit 0 streaming stores, bit 1 small chunks.
  int allreduce_chunk_way(size_t bytes);
  size_t small_chunk_bytes() const;  // kSmallChunkBytes, at most half a slot
  size_t chunk_size_class(size_t bytes) const;  // [2 small chunks, 4): 0, ...; the last is open-ended
  LaneArea* lane(int member) const;
  // Waits until every member has completed lane_completed_ calls (one may
  // still be reading our slot or the ring). Each committed to those calls, so
  // each finishes them unless it died or froze: the wait ends in an error
  // then, not in a fallback.
  void lane_slot_free(const char* op);
  // Waits until ready() holds: spins (members that spin), yields after
  // kSpinBeforeYield, and every kPeerCheckInterval checks the abort flag and
  // the peers' processes; fails naming `what` after the peer timeout.
  template <typename Ready>
  void lane_wait(Ready ready, const char* op, const char* what);
  // The streamed part of a lane call every member committed to: `root`'s
  // `bytes` of `input` into every other member's `output` (root >= 0), or
  // every member's `bytes` into `output` in member order (root < 0).
  void lane_stream(const void* input, void* output, size_t bytes, int root, const char* op);
  // The part of a large lane broadcast (root >= 0) or allgather (root < 0)
  // past the commit: streamed through the ring (lane_stream), or, when the
  // member that chooses (the root; member 0 for an allgather) published its
  // buffer's address, read out of the writers' processes (lane_read). Which
  // is faster changes with the machine's moment (on the AMD EPYC VM the
  // stream was 2-3x faster in some minutes and 2x slower in others), so the
  // chooser times its calls both ways (lane_route_*).
  void lane_move(const void* input, void* output, size_t bytes, int root, const char* op);
  // Every member reads what it receives out of the writers' processes
  // (process_vm_readv from their published `source`), then waits until all
  // have, so that no writer's buffer changes while read. False when a member
  // could not read; every member then knows, and streams instead.
  bool lane_read(const void* input, void* output, size_t bytes, int root, const char* op);
  // The chooser's way for its next large call: read (true) or stream; and
  // the time of its last one, once every member has it (lane_route_pending_).
  bool lane_route_read(size_t bytes, bool allgather);
  void lane_route_settle();
  static size_t lane_size_class(size_t bytes);  // (32 KiB, 64 KiB]: 0, each next one twice as large
  // Whether a lane broadcast (or allgather piece) of `bytes` can be streamed,
  // and the part of the ring each writer streams through.
  bool lane_streams(size_t bytes, bool allgather) const;
  size_t lane_ring_part(bool allgather) const;
  // One lane call: publishes (key, occurrence) with `payload` (nullptr:
  // nothing the others read, or a payload streamed by `finish`) and `source`
  // (lane_read's; 0: none), and once every member has committed to the
  // same call runs `finish` (reading the members' published payloads).
  template <typename Finish>
  LaneOutcome lane_run(uint64_t key, uint64_t occurrence, const void* payload, size_t bytes,
                       std::chrono::steady_clock::duration wait, const char* op, Finish finish,
                       uint64_t source = 0);
  // Scratch of lane_allreduce, one entry per member (one lane call at a time).
  std::vector<uint64_t> lane_seen_;
  std::vector<const void*> lane_inputs_;
  std::vector<uint64_t> lane_read_;  // lane_stream's chunks read from each member
  uint64_t lane_ring_cursor_ = 0;    // chunks streamed so far (the same on every member)
  uint64_t lane_publication_ = 0;
  uint64_t lane_completed_ = 0;
  std::atomic<bool> lane_in_use_{false};
  // HVD_SHM_LANE_BROADCAST (internal, for tests and A/B measurements):
  // kAdaptive, or always stream / always read.
  enum class LaneRoute { kAdaptive, kStream, kRead } lane_route_ = LaneRoute::kAdaptive;
  bool lane_read_refused_ = false;  // a member could not read another's buffer: stream from now on
  // What this member's large lane calls took per byte, for broadcasts [0]
  // and allgathers [1], per size class; streamed is the first way, read the
  // second (lane_route_read).
  static constexpr size_t kLaneSizeClasses = 8;
  std::array<std::array<TimedChoice, kLaneSizeClasses>, 2> lane_route_times_{};
  // This member's last lane call, when it chose the way for it: timed at
  // the next one, once every member has received it (lane_route_settle).
  struct LaneRoutePending {
    std::chrono::steady_clock::time_point began;
    size_t bytes = 0;  // 0: nothing to time
    int root = -1;     // -1: an allgather
    bool read = false;
  } lane_route_pending_;
  uint64_t lane_reads_ = 0;  // large lane calls read out of the writers' processes

  CommOptions options_;
  std::string shm_name_;
  ShmArenaHeader* header_ = nullptr;
  unsigned char* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  size_t slot_bytes_ = 0;
  size_t chunk_bytes_ = 0;  // allreduce_pipelined's chunk: slot_bytes_ unless autotune tries less
  uint64_t step_ = 0;        // steps completed by this member (same on every member)
  bool spin_ = true;         // false when members outnumber cores
  bool deny_single_copy_ = false;  // HVD_SHM_SINGLE_COPY=deny-for-tests on a member other than 0
  // Large allgathers and allreduces read peers' memory (member 0's
  // HVD_SHM_SINGLE_COPY=0: never).
  bool single_copy_ = true;
  // Large allreduces may read peers' memory (member 0 spins; see kSingleCopyAllreduceMinBytes).
  bool single_copy_allreduce_ = true;
  // A single-copy allreduce's first read succeeded on every member: later
  // ones need not try first (the same on every member).
  bool single_copy_proven_ = false;
  bool single_copy_timed_ = false;  // HVD_SHM_SINGLE_COPY unset: allreduce_route times both ways
  static constexpr size_t kAllreduceSizeClasses = 4;
  std::array<uint64_t, kAllreduceSizeClasses> allreduce_route_calls_{};  // the same on every member
  // Member 0's times of its allreduces per byte, per size class, through
  // the slots (the first way) and the single copy (the second).
  std::array<TimedChoice, kAllreduceSizeClasses> allreduce_route_times_{};
  uint64_t single_copy_allreduces_ = 0;
  // Streaming stores for the slots (allreduce_pipelined): what a member
  // writes for the others to read goes to memory instead of its own cache.
  // On the 2-CPU AMD EPYC VM, in the spells when its two CPUs are far apart,
  // taking those lines out of the writer's cache costs 2-3 times what
  // reading them from memory does: P=2 allreduce, ordinary / streaming
  // stores, 64 KiB 35-37 / 19-21 us, 256 KiB 108-121 / 51-65, 1 MiB
  // 390-465 / 175-204; in the spells when they are close, the other way
  // round: 17-19 / 19-27, 36-47 / 55-75, 104-174 / 201-267 (one job
  // switching every few calls; docs/benchmarks.md). Neither wins in both,
  // and the spells change within seconds, so member 0 times both per size
  // class (TimedChoice, retrying the slower way every kRouteRetryEvery runs)
  // unless HVD_SHM_STREAM fixes it.
  bool stream_timed_ = true;    // HVD_SHM_STREAM unset: member 0 times both ways
  bool stream_always_ = false;  // HVD_SHM_STREAM=1
  static constexpr size_t kStreamSizeClasses = 16;
  // Member 0's times of its allreduces through the slots per byte, per size
  // class, with ordinary stores (the first way) and streaming ones; where
  // allreduce_chunk_way chooses, the stores are part of its way instead.
  std::array<TimedChoice, kStreamSizeClasses> stream_times_{};
  // An allreduce through the slots from two small chunks up goes in chunks
  // of a whole slot or of kSmallChunkBytes, with ordinary or streaming
  // stores. Members that yield (1 MiB slots): at P=4 on the 2-CPU Intel VM
  // small chunks were about 15 % faster at 4 and 16 MiB, but at P=2 with
  // HOROVOD_SPIN_WAIT=0 beside two busy loops, where each barrier may wait
  // out a scheduler time slice, whole slots were 4-10x faster at 16 MiB.
  // Members that spin (512 KiB slots): at P=2, 1 MiB, small chunks were
  // faster on the Intel VM and slower on the AMD EPYC one
  // (docs/benchmarks.md). Member 0 times the four ways per size class and
  // publishes each call's a call ahead (as allreduce_route). One choice of
  // four, not the stores' choice beside a chunk choice: two timed side by
  // side would line their runs up, each judging the other's way as its own.
  static constexpr int kChunkWays = 4;
  static constexpr size_t kChunkSizeClasses = 8;
  static constexpr size_t kSmallChunkBytes = 256 * 1024;
  int chunk_fixed_ = -1;  // member 0's HVD_SHM_CHUNK: 0 slot, 1 small, -1 timed
  std::array<uint64_t, kChunkSizeClasses> chunk_calls_{};  // the same on every member
  std::array<TimedChoiceOf<kChunkWays>, kChunkSizeClasses> chunk_times_{};
  uint64_t small_chunk_allreduces_ = 0;
  std::vector<unsigned char> single_copy_scratch_;  // allreduce_single_copy: the others' chunks
  std::vector<const void*> single_copy_sources_;    // allreduce_single_copy: one entry per member
  // allreduce_single_copy: member m's lists of input (2m) and output (2m+1) parts
  std::vector<std::vector<ArrayPart>> single_copy_lists_;
  std::vector<iovec> local_iovecs_, remote_iovecs_;  // add_iovecs
  std::chrono::steady_clock::duration spin_budget_ = std::chrono::microseconds(200);
  std::atomic<bool> local_abort_{false};
};

}  // namespace hvd
