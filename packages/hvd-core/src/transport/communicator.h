// communicator.h - the data plane of one process set: collectives over the
// set's members, implemented by a transport.
//
//   SoloCommunicator         a set of one member: local copies, nothing shared
//                            (transport/solo_communicator.h)
//   ShmCommunicator          all members on one host: a shared-memory arena
//   TcpCommunicator          any members: full mesh of authenticated TCP links,
//                            ring for large payloads, recursive doubling for small
//   HierarchicalCommunicator several hosts: shared memory inside each host and
//                            TCP across hosts (allreduce: local reduce-scatter,
//                            cross-host allreduce of each shard, local allgather)
//   MpiCommunicator          HOROVOD_CPU_OPERATIONS=mpi: the MPI library's
//                            collectives (transport/mpi/mpi_communicator.h)
//
// All calls are collective: every member calls the same method with matching
// sizes, in the same order (the engine's negotiation guarantees that). Any
// failure (peer death, broken link, no progress for `timeout_seconds`, abort())
// throws Error(kInternal) naming the peer rank and the operation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/interrupt.h"

namespace hvd {

class Store;
class ConnectionManager;

// Where part of a packed array lies: elements [first, first + count) of the
// array are at `data` (a fused allreduce's tensors, or pieces of them).
struct ArrayPart {
  unsigned char* data;
  size_t first, count;
};

struct CommOptions {
  // Unique per job, init generation and process set, e.g. "<jobhash>/g0/ps3".
  // Used for store keys, connection tags and shared-memory names.
  std::string key;
  int rank = 0;                      // this process's index among the members
  std::vector<int> global_ranks;     // member index -> global rank
  std::vector<std::string> hosts;    // member index -> host name (same name = same host)
  double timeout_seconds = 5.0;      // no progress for this long = the peer is dead
  bool allow_shm = true;             // HOROVOD_SHM_DISABLE=1 turns it off
  // Several hosts with as many members each: allreduce / allgather in a
  // shared-memory stage per host and a TCP stage across hosts.
  bool hierarchical = true;            // HOROVOD_HIERARCHICAL_ALLREDUCE
  bool hierarchical_allgather = true;  // HOROVOD_HIERARCHICAL_ALLGATHER
  bool use_mpi = false;              // HOROVOD_CPU_OPERATIONS=mpi: MpiCommunicator for everything
  // Whether waits may busy-poll (the engine's choice for this machine, see
  // EngineConfig::spin); unset: the transport judges from its own members.
  std::optional<bool> spin;
  // Called now and then while the constructor waits for other members (store
  // keys, connections); what it throws ends the wait. The engine's throws
  // when the job has failed meanwhile, e.g. a member died after agreeing to
  // create the set.
  Interrupt interrupt;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place: data (count elements) becomes the reduction over all members.
  virtual void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;
  // out = the reduction of every member's `in`, where the transport can write
  // it there directly (NCCL, shared memory, hierarchical); returns false,
  // having done nothing, where it cannot, and the caller copies `in` to `out`
  // and reduces in place.
  virtual bool allreduce_out_of_place(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) {
    return false;
  }
  // out = `scale` times the reduction of every member's `in` (`in` may be
  // `out`), scaled as scale_buffer does, where the transport can scale each
  // part of the result while that part is in the cache (shared memory);
  // returns false, having done nothing, where it cannot, and the caller
  // scales the result in a pass of its own.
  virtual bool allreduce_scaled(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, double scale) {
    return false;
  }
  // Whether allreduce_parts takes an array of `bytes` (shared memory, at the
  // sizes its slots reduce a run at a time); where not, the caller packs the
  // parts into one buffer and unpacks the result.
  virtual bool allreduces_parts(size_t bytes) const {
    (void)bytes;
    return false;
  }
  // allreduce_scaled of a packed array of `count` elements that lies in parts
  // of other buffers, reduced where they lie: this member's input is read
  // from the parts `in`, the result written to the parts `out` (each list in
  // order of `first`, together covering the array; an element's output is
  // its input's memory or memory no input uses). Only where allreduces_parts.
  virtual void allreduce_parts(const std::vector<ArrayPart>& in, const std::vector<ArrayPart>& out, size_t count,
                               DataType dtype, ReduceOp op, double scale);
  // out = concatenation over members m of (bytes_per_rank[m] bytes from m);
  // `in` holds bytes_per_rank[rank()] bytes. May be called with some sizes 0.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) = 0;
  // data (bytes) on `root` (member index) is copied to every member.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Sends send_bytes[m] bytes (consecutive in `in`, in member order) to member
  // m; receives recv_bytes[m] bytes from m into `out` in member order.
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes) = 0;
  // `in` holds sum(counts) elements; out (counts[rank()] elements) receives
  // this member's block of the reduction. Blocks are consecutive in member order.
  virtual void reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Thread-safe: makes a blocked call and every later call throw
  // Error(kInternal) with `reason` promptly (within ~100 ms).
  virtual void abort(const std::string& reason) = 0;
  // A short name for logs: "shm", "tcp", "hierarchical(shm+tcp)".
  virtual std::string transport_name() const = 0;
  // The name of what runs `activity` ("ALLREDUCE", "ALLGATHER", "BCAST", ...)
  // now, for the timeline: a composite names the part it hands it to.
  virtual std::string transport_name_for(const std::string& activity) const {
    (void)activity;
    return transport_name();
  }
  // The chunk its pipelined allreduce cuts a buffer into by default, in
  // bytes; 0 when it has no such chunk (nothing for autotune to try).
  virtual size_t pipeline_chunk_default() const { return 0; }
  // Sets that chunk from the next call on (0: the default). Every member
  // must set the same value before the same collective: the engine applies
  // what the coordinator stamped on the response.
  virtual void set_pipeline_chunk_bytes(size_t bytes) { (void)bytes; }
  // A fused allreduce of `bytes` runs in pieces of this many bytes, each
  // reduced where its tensors lie (allreduce_parts) or packed, reduced and
  // unpacked while it is in the cache; `bytes` itself: one piece; 0: packed
  // at once (a transport whose calls cost more than the copies' trips to
  // memory). The same on every member for the same `bytes`.
  virtual size_t fused_piece_bytes(size_t bytes) const {
    (void)bytes;
    return 0;
  }

 protected:
  int rank_ = 0;
  int size_ = 1;
};

// Builds the right communicator for `options` (see the table above); the
// one place that decides a transport, a set of one member included.
// Collective over the members: every member calls it with the same key.
// `connections` may be null only for a set of one (a one-rank job has none).
std::unique_ptr<Communicator> create_communicator(const CommOptions& options, Store& store,
                                                  ConnectionManager* connections);

}  // namespace hvd
