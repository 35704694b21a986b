// tcp_communicator.h - collectives over a full mesh of authenticated TCP
// links: recursive doubling for small allreduces, a pipelined ring for large
// ones, all driven by one poll loop over non-blocking sockets so sends and
// receives always progress together (no send/send deadlock).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "net/socket.h"
#include "transport/communicator.h"

namespace hvd {

class TcpCommunicator : public Communicator {
 public:
  // Connects to every other member with tag options.key + "/data".
  TcpCommunicator(const CommOptions& options, ConnectionManager& connections);
  ~TcpCommunicator() override;

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;
  void barrier() override;
  void abort(const std::string& reason) override;
  std::string transport_name() const override { return "tcp"; }

  // One directed byte transfer with a member; the unit the poll loop drives.
  struct Transfer {
    int member = 0;
    bool is_send = false;
    unsigned char* data = nullptr;
    size_t bytes = 0;
    size_t done = 0;
    // Sends: only bytes below *available may go out yet (a relay forwards
    // what it has received so far). Null = everything is ready.
    const size_t* available = nullptr;
    // Receives: called after each progress with the new `done`.
    std::function<void(size_t)> on_progress;
  };

 private:
  // Drives all transfers to completion (at most one send and one receive per
  // member). Throws Error(kInternal) naming `op` and the member on failure,
  // no progress for timeout_seconds, or abort().
  void run(std::vector<Transfer>& transfers, const char* op);
  void exchange(int send_to, const void* send_data, size_t send_bytes, int recv_from, void* recv_data,
                size_t recv_bytes, const char* op);
  void allreduce_recursive_doubling(void* data, size_t count, DataType dtype, ReduceOp op);
  void allreduce_ring(void* data, size_t count, DataType dtype, ReduceOp op);
  // Ring reduce-scatter over `blocks` (element counts, member order) of
  // `work`; afterwards block rank() holds the full reduction.
  void ring_reduce_scatter(unsigned char* work, const std::vector<size_t>& blocks, DataType dtype,
                           ReduceOp op, const char* op_name);
  void check_abort(const char* op);
  std::string member_name(int member) const;

  CommOptions options_;
  std::vector<Socket> links_;  // index = member; links_[rank()] unused
  int abort_fd_ = -1;          // eventfd in every poll set, so abort() interrupts a wait
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
  std::vector<unsigned char> scratch_;
};

}  // namespace hvd
