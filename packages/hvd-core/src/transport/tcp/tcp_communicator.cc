// tcp_communicator.cc - collectives over TCP links between all members:
// recursive doubling (small allreduce), ring reduce-scatter + allgather
// (large allreduce), ring allgatherv and reducescatter, binomial-tree or
// pipelined-chain broadcast, pairwise alltoallv, dissemination barrier.
// Every algorithm is a sequence of run() calls over non-blocking sockets.
#include "transport/tcp/tcp_communicator.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/logging.h"
#include "net/connection_manager.h"
#include "reduce/reduce.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

// Payloads below this are latency-bound: recursive doubling (log P rounds of
// the whole buffer) beats the ring's 2(P-1) rounds.
constexpr size_t kRingThresholdBytes = 64 * 1024;
// Received ring data is reduced in pieces this big while the rest streams in.
constexpr size_t kReducePieceBytes = 64 * 1024;

std::vector<size_t> split_evenly(size_t count, int parts) {
  std::vector<size_t> blocks(parts, count / parts);
  for (size_t i = 0; i < count % parts; ++i) blocks[i] += 1;
  return blocks;
}

std::vector<size_t> prefix_offsets(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return offsets;
}

}  // namespace

TcpCommunicator::TcpCommunicator(const CommOptions& options, ConnectionManager& connections)
    : options_(options) {
  rank_ = options.rank;
  size_ = static_cast<int>(options.global_ranks.size());
  if (size_ == 0) size_ = 1;
  abort_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  links_.resize(size_);
  std::string tag = options.key + "/data";
  for (int m = 0; m < size_; ++m) {
    if (m == rank_) continue;
    links_[m] = connections.connect(options.global_ranks[m], tag, options.interrupt);
    links_[m].set_peer_name(member_name(m));
  }
}

TcpCommunicator::~TcpCommunicator() {
  for (auto& link : links_) link.close();
  if (abort_fd_ >= 0) ::close(abort_fd_);
}

std::string TcpCommunicator::member_name(int member) const {
  std::string s = "member " + std::to_string(member);
  if (member < static_cast<int>(options_.global_ranks.size())) {
    s += " (global rank " + std::to_string(options_.global_ranks[member]) + ")";
  }
  return s;
}

void TcpCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true);
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(abort_fd_, &one, sizeof(one));
  (void)ignored;
  // Peers blocked on us see EOF at once instead of waiting for their timeout.
  for (auto& link : links_) {
    if (link.valid()) ::shutdown(link.fd(), SHUT_RDWR);
  }
}

void TcpCommunicator::check_abort(const char* op) {
  if (!aborted_.load()) return;
  std::lock_guard<std::mutex> lock(abort_mu_);
  throw_error(ErrorCode::kInternal, std::string("tcp ") + op + " on " + member_name(rank_) +
                                        ": the communicator was aborted: " + abort_reason_);
}

void TcpCommunicator::run(std::vector<Transfer>& transfers, const char* op) {
  check_abort(op);
  auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.timeout_seconds));
  Clock::time_point last_progress = Clock::now();
  std::vector<pollfd> fds;
  std::vector<size_t> fd_transfer;
  try {
    for (;;) {
      bool pending = false;
      bool progressed = false;
      for (auto& t : transfers) {
        if (t.done >= t.bytes) continue;
        pending = true;
        Socket& link = links_[t.member];
        if (t.is_send) {
          size_t limit = t.available ? std::min(*t.available, t.bytes) : t.bytes;
          if (limit <= t.done) continue;
          size_t n = link.send_some(t.data + t.done, limit - t.done);
          if (n > 0) {
            t.done += n;
            progressed = true;
          }
        } else {
          size_t n = link.recv_some(t.data + t.done, t.bytes - t.done);
          if (n > 0) {
            t.done += n;
            progressed = true;
            if (t.on_progress) t.on_progress(t.done);
          }
        }
      }
      if (!pending) return;
      if (progressed) {
        last_progress = Clock::now();
        continue;
      }
      fds.clear();
      fd_transfer.clear();
      fds.push_back({abort_fd_, POLLIN, 0});
      for (size_t i = 0; i < transfers.size(); ++i) {
        Transfer& t = transfers[i];
        if (t.done >= t.bytes) continue;
        if (t.is_send && t.available && *t.available <= t.done) continue;  // waiting on our own receive
        fds.push_back({links_[t.member].fd(), static_cast<short>(t.is_send ? POLLOUT : POLLIN), 0});
        fd_transfer.push_back(i);
      }
      auto remaining = timeout - (Clock::now() - last_progress);
      int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(remaining).count()) + 1;
      int rc = ::poll(fds.data(), fds.size(), std::max(wait_ms, 0));
      if (rc < 0 && errno != EINTR) {
        throw_error(ErrorCode::kInternal, std::string("poll failed: ") + std::strerror(errno));
      }
      check_abort(op);
      if (rc == 0 && Clock::now() - last_progress >= timeout) {
        std::string stuck;
        for (size_t i : fd_transfer) {
          const Transfer& t = transfers[i];
          stuck += (stuck.empty() ? "" : "; ") + std::string(t.is_send ? "sending to " : "receiving from ") +
                   member_name(t.member) + " (" + std::to_string(t.done) + "/" + std::to_string(t.bytes) + " bytes)";
        }
        throw_error(ErrorCode::kInternal, "no progress for " + std::to_string(options_.timeout_seconds) +
                                              " s: " + stuck);
      }
    }
  } catch (const Error& e) {
    if (aborted_.load()) check_abort(op);  // report the abort, not its side effects
    std::string message = std::string("tcp ") + op + " on " + member_name(rank_) + ": " + e.what();
    // The byte streams are now out of step for good; closing our links makes
    // every peer fail promptly too instead of waiting for its own timeout.
    abort(message);
    if (dynamic_cast<const LinkClosed*>(&e) != nullptr) throw LinkClosed(ErrorCode::kInternal, message);
    throw_error(ErrorCode::kInternal, message);
  }
}

void TcpCommunicator::exchange(int send_to, const void* send_data, size_t send_bytes, int recv_from,
                               void* recv_data, size_t recv_bytes, const char* op) {
  std::vector<Transfer> transfers;
  transfers.reserve(2);
  if (send_bytes > 0 && send_to >= 0) {
    Transfer t;
    t.member = send_to;
    t.is_send = true;
    t.data = const_cast<unsigned char*>(static_cast<const unsigned char*>(send_data));
    t.bytes = send_bytes;
    transfers.push_back(std::move(t));
  }
  if (recv_bytes > 0 && recv_from >= 0) {
    Transfer t;
    t.member = recv_from;
    t.data = static_cast<unsigned char*>(recv_data);
    t.bytes = recv_bytes;
    transfers.push_back(std::move(t));
  }
  run(transfers, op);
}

void TcpCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  check_abort("allreduce");
  if (count == 0) return;
  if (size_ == 1) {
    if (dtype == DataType::kBool) {
      const void* srcs[1] = {data};
      reduce_many(data, srcs, 1, count, dtype, op);
    }
    return;
  }
  if (count * dtype_size(dtype) < kRingThresholdBytes || count < static_cast<size_t>(size_)) {
    allreduce_recursive_doubling(data, count, dtype, op);
  } else {
    allreduce_ring(data, count, dtype, op);
  }
}

void TcpCommunicator::allreduce_recursive_doubling(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * dtype_size(dtype);
  std::vector<unsigned char> incoming(bytes);
  int pow2 = 1;
  while (pow2 * 2 <= size_) pow2 *= 2;
  const int extra = size_ - pow2;
  // The first 2*extra members pair up: evens hand their data to the next odd
  // member and sit out, so a power of two takes part in the doubling.
  int folded_rank;
  if (rank_ < 2 * extra) {
    if (rank_ % 2 == 0) {
      exchange(rank_ + 1, data, bytes, -1, nullptr, 0, "allreduce");
      folded_rank = -1;
    } else {
      exchange(-1, nullptr, 0, rank_ - 1, incoming.data(), bytes, "allreduce");
      reduce_into(data, incoming.data(), count, dtype, op);
      folded_rank = rank_ / 2;
    }
  } else {
    folded_rank = rank_ - extra;
  }
  if (folded_rank >= 0) {
    for (int mask = 1; mask < pow2; mask <<= 1) {
      int partner_folded = folded_rank ^ mask;
      int partner = partner_folded < extra ? partner_folded * 2 + 1 : partner_folded + extra;
      exchange(partner, data, bytes, partner, incoming.data(), bytes, "allreduce");
      reduce_into(data, incoming.data(), count, dtype, op);
    }
  }
  if (rank_ < 2 * extra) {
    if (rank_ % 2 == 0) {
      exchange(-1, nullptr, 0, rank_ + 1, data, bytes, "allreduce");
    } else {
      exchange(rank_ - 1, data, bytes, -1, nullptr, 0, "allreduce");
    }
  }
}

void TcpCommunicator::ring_reduce_scatter(unsigned char* work, const std::vector<size_t>& blocks,
                                          DataType dtype, ReduceOp op, const char* op_name) {
  const size_t esize = dtype_size(dtype);
  const std::vector<size_t> offsets = prefix_offsets(blocks);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  size_t max_block = *std::max_element(blocks.begin(), blocks.end());
  if (scratch_.size() < max_block * esize) scratch_.resize(max_block * esize);
  const size_t piece_elems = std::max<size_t>(1, kReducePieceBytes / esize);
  for (int step = 0; step < size_ - 1; ++step) {
    int send_block = (rank_ - step - 1 + 2 * size_) % size_;
    int recv_block = (rank_ - step - 2 + 2 * size_) % size_;
    std::vector<Transfer> transfers;
    transfers.reserve(2);
    if (blocks[send_block] > 0) {
      Transfer t;
      t.member = right;
      t.is_send = true;
      t.data = work + offsets[send_block] * esize;
      t.bytes = blocks[send_block] * esize;
      transfers.push_back(std::move(t));
    }
    if (blocks[recv_block] > 0) {
      Transfer t;
      t.member = left;
      t.data = scratch_.data();
      t.bytes = blocks[recv_block] * esize;
      unsigned char* target = work + offsets[recv_block] * esize;
      unsigned char* incoming = scratch_.data();
      size_t total = blocks[recv_block];
      auto reduced = std::make_shared<size_t>(0);
      // Reduce what has arrived while the rest is still on the wire.
      t.on_progress = [=](size_t done_bytes) {
        size_t ready = done_bytes / esize;
        if (ready - *reduced >= piece_elems || ready == total) {
          reduce_into(target + *reduced * esize, incoming + *reduced * esize, ready - *reduced, dtype, op);
          *reduced = ready;
        }
      };
      transfers.push_back(std::move(t));
    }
    run(transfers, op_name);
  }
}

void TcpCommunicator::allreduce_ring(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t esize = dtype_size(dtype);
  unsigned char* work = static_cast<unsigned char*>(data);
  std::vector<size_t> blocks = split_evenly(count, size_);
  ring_reduce_scatter(work, blocks, dtype, op, "allreduce");
  std::vector<size_t> offsets = prefix_offsets(blocks);
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  for (int step = 0; step < size_ - 1; ++step) {
    int send_block = (rank_ - step + size_) % size_;
    int recv_block = (rank_ - step - 1 + size_) % size_;
    exchange(right, work + offsets[send_block] * esize, blocks[send_block] * esize, left,
             work + offsets[recv_block] * esize, blocks[recv_block] * esize, "allreduce");
  }
}

void TcpCommunicator::reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                    DataType dtype, ReduceOp op) {
  check_abort("reducescatter");
  if (static_cast<int>(counts.size()) != size_) {
    throw_error(ErrorCode::kInternal, "tcp reducescatter: counts has " + std::to_string(counts.size()) +
                                          " entries for " + std::to_string(size_) + " members");
  }
  const size_t esize = dtype_size(dtype);
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<unsigned char> work(static_cast<const unsigned char*>(in),
                                  static_cast<const unsigned char*>(in) + total * esize);
  if (size_ > 1) ring_reduce_scatter(work.data(), counts, dtype, op, "reducescatter");
  size_t offset = prefix_offsets(counts)[rank_];
  if (counts[rank_] > 0) {
    if (size_ == 1 && dtype == DataType::kBool) {
      const void* srcs[1] = {work.data()};
      reduce_many(work.data(), srcs, 1, counts[0], dtype, op);
    }
    std::memcpy(out, work.data() + offset * esize, counts[rank_] * esize);
  }
}

void TcpCommunicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) {
  check_abort("allgatherv");
  if (static_cast<int>(bytes_per_rank.size()) != size_) {
    throw_error(ErrorCode::kInternal, "tcp allgatherv: bytes_per_rank has " +
                                          std::to_string(bytes_per_rank.size()) + " entries for " +
                                          std::to_string(size_) + " members");
  }
  std::vector<size_t> offsets = prefix_offsets(bytes_per_rank);
  unsigned char* output = static_cast<unsigned char*>(out);
  if (bytes_per_rank[rank_] > 0 && output + offsets[rank_] != in) {
    std::memmove(output + offsets[rank_], in, bytes_per_rank[rank_]);
  }
  const int right = (rank_ + 1) % size_;
  const int left = (rank_ + size_ - 1) % size_;
  for (int step = 0; step < size_ - 1; ++step) {
    int send_block = (rank_ - step + size_) % size_;
    int recv_block = (rank_ - step - 1 + size_) % size_;
    exchange(right, output + offsets[send_block], bytes_per_rank[send_block], left, output + offsets[recv_block],
             bytes_per_rank[recv_block], "allgatherv");
  }
}

void TcpCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_abort("broadcast");
  if (root < 0 || root >= size_) {
    throw_error(ErrorCode::kInternal, "tcp broadcast: root " + std::to_string(root) + " is not a member");
  }
  if (size_ == 1 || bytes == 0) return;
  unsigned char* buf = static_cast<unsigned char*>(data);
  const int relative = (rank_ - root + size_) % size_;
  auto actual = [&](int rel) { return (rel + root) % size_; };
  std::vector<Transfer> transfers;
  transfers.reserve(size_);
  if (bytes < kRingThresholdBytes) {
    // Binomial tree: log2(P) rounds for latency-bound payloads.
    int lowest_bit = 1;
    if (relative == 0) {
      while (lowest_bit < size_) lowest_bit <<= 1;
    } else {
      lowest_bit = relative & -relative;
      exchange(-1, nullptr, 0, actual(relative - lowest_bit), buf, bytes, "broadcast");
    }
    for (int mask = lowest_bit >> 1; mask >= 1; mask >>= 1) {
      if (relative + mask >= size_) continue;
      Transfer t;
      t.member = actual(relative + mask);
      t.is_send = true;
      t.data = buf;
      t.bytes = bytes;
      transfers.push_back(std::move(t));
    }
    run(transfers, "broadcast");
    return;
  }
  // Chain: each member forwards bytes as soon as they arrive, so a large
  // payload crosses every link at once instead of log2(P) times in sequence.
  if (relative > 0) {
    Transfer t;
    t.member = actual(relative - 1);
    t.data = buf;
    t.bytes = bytes;
    transfers.push_back(std::move(t));
  }
  if (relative + 1 < size_) {
    Transfer t;
    t.member = actual(relative + 1);
    t.is_send = true;
    t.data = buf;
    t.bytes = bytes;
    if (relative > 0) t.available = &transfers[0].done;
    transfers.push_back(std::move(t));
  }
  run(transfers, "broadcast");
}

void TcpCommunicator::alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                const std::vector<size_t>& recv_bytes) {
  check_abort("alltoallv");
  if (static_cast<int>(send_bytes.size()) != size_ || static_cast<int>(recv_bytes.size()) != size_) {
    throw_error(ErrorCode::kInternal, "tcp alltoallv: send/recv sizes must have one entry per member (" +
                                          std::to_string(size_) + ")");
  }
  std::vector<size_t> send_offsets = prefix_offsets(send_bytes);
  std::vector<size_t> recv_offsets = prefix_offsets(recv_bytes);
  const unsigned char* input = static_cast<const unsigned char*>(in);
  unsigned char* output = static_cast<unsigned char*>(out);
  if (send_bytes[rank_] > 0) std::memmove(output + recv_offsets[rank_], input + send_offsets[rank_], send_bytes[rank_]);
  for (int step = 1; step < size_; ++step) {
    int to = (rank_ + step) % size_;
    int from = (rank_ - step + size_) % size_;
    exchange(to, input + send_offsets[to], send_bytes[to], from, output + recv_offsets[from], recv_bytes[from],
             "alltoallv");
  }
}

void TcpCommunicator::barrier() {
  check_abort("barrier");
  // Dissemination barrier: after round k everyone has heard, directly or
  // not, from the 2^(k+1) members before it.
  unsigned char token_out = 1, token_in = 0;
  for (int distance = 1; distance < size_; distance <<= 1) {
    exchange((rank_ + distance) % size_, &token_out, 1, (rank_ - distance + size_) % size_, &token_in, 1, "barrier");
  }
}

}  // namespace hvd
