// message.h - what ranks tell the coordinator (RequestMeta) and what the
// coordinator tells every rank to run (Response), plus their wire format.
// A Response is executed by every member of the process set in the order
// the coordinator emitted it, which is what keeps the ranks in lock-step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "hvd/c_api.h"

namespace hvd {

enum class Collective : uint8_t {
  kAllreduce = HVD_ALLREDUCE,
  kAllgather = HVD_ALLGATHER,
  kBroadcast = HVD_BROADCAST,
  kAlltoall = HVD_ALLTOALL,
  kReducescatter = HVD_REDUCESCATTER,
  kBarrier = HVD_BARRIER,
  kJoin = HVD_JOIN,
};

const char* collective_name(Collective c);        // "allreduce", ...
std::string collective_upper_name(Collective c);  // "ALLREDUCE", for the timeline

// Where a tensor's memory is. Every rank must submit a tensor name on the
// same kind of device; responses fuse only tensors of one kind.
enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

// The longest tensor name a rank may submit (enqueue refuses longer ones)
// and a control message may carry (decoding refuses longer ones).
constexpr size_t kMaxTensorNameBytes = 64 * 1024;
const char* device_name(Device d);  // "CPU", "GPU"

// One tensor of one rank's request, as sent to the coordinator.
struct RequestMeta {
  std::string name;
  Collective collective = Collective::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device = Device::kCpu;
  int32_t reduce_op = HVD_OP_SUM;  // hvd_reduce_op
  int32_t root_rank = 0;  // broadcast: the root's position in the process set
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  // Grouped collectives: every tensor of a group carries the group's key
  // (the first tensor's name) and its size; the group is released as a unit.
  std::string group_key;
  int32_t group_size = 0;
  // A small host allreduce carries its (prescaled) input: when every member's
  // has arrived, the coordinator reduces them and sends the result back with
  // the response, one round trip instead of negotiation plus a collective.
  // Not part of the request's identity (operator== ignores it).
  std::string inline_data;
};

// The largest input a request carries inline.
constexpr size_t kMaxInlineBytes = 4096;

// Field by field: two members asked for exactly the same thing.
inline bool operator==(const RequestMeta& a, const RequestMeta& b) {
  return a.collective == b.collective && a.dtype == b.dtype && a.device == b.device && a.reduce_op == b.reduce_op &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.group_size == b.group_size && a.shape == b.shape && a.name == b.name && a.group_key == b.group_key;
}
inline bool operator!=(const RequestMeta& a, const RequestMeta& b) { return !(a == b); }

struct Response {
  enum class Kind : uint8_t { kExecute = 0, kError = 1 };
  Kind kind = Kind::kExecute;
  Collective collective = Collective::kAllreduce;
  DataType dtype = DataType::kFloat32;
  Device device = Device::kCpu;
  int32_t reduce_op = HVD_OP_SUM;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<std::string> names;
  // Per tensor: the agreed shape (allgather: with rank 0's first dimension).
  std::vector<std::vector<int64_t>> shapes;
  // Allgather: per tensor, the first dimension of every member.
  std::vector<std::vector<int64_t>> first_dims;
  // Members that have joined: they take part with zeros (allreduce) or no
  // rows (allgather).
  std::vector<int32_t> joined_ranks;
  int32_t last_joined_rank = -1;  // join
  std::string error_message;      // kError
  int32_t error_code = HVD_ERROR_PRECONDITION;  // kError: an hvd_error_code
  std::vector<int32_t> error_ranks;             // kError: the global ranks at fault
  // An allreduce of one tensor whose members all sent their input inline:
  // the reduced (not yet postscaled) result; no collective runs.
  std::string inline_result;
  // Non-zero: the tensor may run in the same-host fast lane from now on,
  // under this key (unique in the process set, never reused).
  uint64_t lane_key = 0;
  // Whether a set spanning hosts runs this response's allreduce and
  // allgather in stages (set by the coordinator on every response it sends,
  // so every member switches at the same response when autotune flips them).
  bool hierarchical_allreduce = true;
  bool hierarchical_allgather = true;
  // The chunk of the transport's pipelined allreduce for this response, in
  // bytes (0: the transport's own); stamped like the staging flags, so every
  // member cuts a buffer into the same chunks.
  uint32_t pipeline_chunk_bytes = 0;
  // The cycle time autotune is trying, in microseconds (0: autotune is off,
  // and each member keeps its HOROVOD_CYCLE_TIME); stamped like the chunk,
  // so that every member's burst hold (ProcessSetRuntime::enqueue) follows
  // the coordinator's.
  uint32_t cycle_time_us = 0;
};

// Bytes of the tensors a response names, at their agreed shapes (for an
// allgather: rank 0's rows only).
int64_t response_bytes(const Response& r);

// The reduction a transport runs for an hvd_reduce_op (Average: Sum, then
// the executor scales).
ReduceOp transport_op(int32_t op);
// What a reduction's result is multiplied by afterwards: the postscale
// factor, and for Average also 1 / the number of members reduced over.
double result_scale(int32_t op, double postscale, int members);
// Elements of a tensor of `shape`.
int64_t num_elements(const std::vector<int64_t>& shape);
// Reducescatter's split of `rows` rows over `members`: as even as it goes,
// the first members taking one more. The rows member `member` gets.
int64_t scattered_rows(int64_t rows, int64_t members, int64_t member);

// Control-channel message types.
enum class MessageType : uint8_t {
  kRequests = 1,   // worker -> coordinator: vector<RequestMeta>
  kResponses = 2,  // coordinator -> worker: vector<Response>
  kHeartbeat = 3,  // both ways, when idle
  kGoodbye = 4,    // clean shutdown of the sender
  kAbort = 5,      // coordinator -> worker: the job failed; payload: reason
  kWaiting = 6,    // worker -> coordinator: names the worker is blocked on (sent when they change)
  kRingOffer = 7,  // coordinator -> worker, at start: a shared-memory ring's nonce and name, or "" (none)
  kRingReply = 8,  // worker -> coordinator, the answer: "1" (attached: later messages use the ring) or "0"
};

std::string encode_requests(const std::vector<RequestMeta>& requests);
std::vector<RequestMeta> decode_requests(const std::string& payload);
std::string encode_responses(const std::vector<Response>& responses);
std::vector<Response> decode_responses(const std::string& payload);
std::string encode_names(const std::vector<std::string>& names);
// kAbort's payload: why a process set failed, with the ranks at fault.
std::string encode_failure(const Error& error);
Error decode_failure(const std::string& payload);
std::vector<std::string> decode_names(const std::string& payload);

}  // namespace hvd
