// solo_communicator.h - the transport of a set with one member: every
// collective is at most a local copy, and nothing is connected or shared.
// Bool results are made canonical (0/1) as the other transports' are.
// create_communicator (transport/communicator.h) picks it for any set of
// one, whatever the options ask for.
#pragma once

#include <string>
#include <vector>

#include "transport/communicator.h"

namespace hvd {

class SoloCommunicator : public Communicator {
 public:
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void*, size_t, int) override {}
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  void barrier() override {}
  void abort(const std::string&) override {}
  std::string transport_name() const override { return "LOCAL"; }
};

}  // namespace hvd
