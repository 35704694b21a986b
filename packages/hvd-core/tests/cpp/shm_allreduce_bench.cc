// shm_allreduce_bench.cc - float32 allreduce latency and bus bandwidth of
// the shared-memory transport (or TCP over loopback, for comparison) with P
// forked processes, as separate ranks would run, coordinated through a
// throwaway file-backed store.
//   usage: shm_allreduce_bench [P=2] [max_bytes=268435456] [shm|tcp]
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "auth/hmac_sha256.h"
#include "common/error.h"
#include "file_store.h"
#include "net/connection_manager.h"
#include "rendezvous/store.h"
#include "transport/tcp/tcp_communicator.h"
#include "transport/shm/shm_communicator.h"

using namespace hvd;
using hvd_test::FileStore;

namespace {

void run_member(int rank, int size, const std::string& dir, size_t max_bytes, bool use_tcp) {
  FileStore store(dir);
  CommOptions options;
  options.key = "bench-" + dir;
  options.rank = rank;
  options.timeout_seconds = 30;
  for (int m = 0; m < size; ++m) {
    options.global_ranks.push_back(m);
    options.hosts.push_back("localhost");
  }
  std::unique_ptr<ConnectionManager> connections;
  std::unique_ptr<Communicator> comm_owner;
  if (use_tcp) {
    connections = std::make_unique<ConnectionManager>(rank, "bench-secret", "127.0.0.1", 30.0);
    store.set("addr" + std::to_string(rank), connections->address());
    std::vector<std::string> addresses;
    for (int m = 0; m < size; ++m) addresses.push_back(store.get("addr" + std::to_string(m), 30.0));
    connections->set_peer_addresses(addresses);
    comm_owner = std::make_unique<TcpCommunicator>(options, *connections);
  } else {
    comm_owner = std::make_unique<ShmCommunicator>(options, store);
  }
  Communicator& comm = *comm_owner;
  for (size_t bytes = 4; bytes <= max_bytes; bytes *= (bytes < 4096 ? 16 : 4)) {
    size_t count = bytes / 4;
    std::vector<float> data(count, 1.0f);
    int iterations = bytes <= 65536 ? 20000 : static_cast<int>(std::max<size_t>(3, (size_t(1) << 30) / bytes / 2));
    if (size > static_cast<int>(std::thread::hardware_concurrency()) && bytes <= 65536) iterations = 2000;
    for (int i = 0; i < 3; ++i) comm.allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm.allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Guard against measuring a broken collective: check one result.
    std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
    comm.allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (data[count - 1] != static_cast<float>(size * (size + 1) / 2)) {
      std::fprintf(stderr, "rank %d: wrong allreduce result %f at %zu bytes\n", rank, data[count - 1], bytes);
      _exit(1);
    }
    if (rank == 0) {
      double per_call = seconds / iterations;
      double algbw = bytes / per_call / 1e9;
      double busbw = algbw * 2.0 * (size - 1) / size;
      std::printf("%s P=%d bytes=%10zu  time=%10.2f us  algbw=%6.2f GB/s  busbw=%6.2f GB/s\n", comm.transport_name().c_str(), size, bytes,
                  per_call * 1e6, algbw, busbw);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int size = argc > 1 ? std::atoi(argv[1]) : 2;
  size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (size_t(256) << 20);
  bool use_tcp = argc > 3 && std::string(argv[3]) == "tcp";
  char dir_template[] = "/tmp/hvd-bench-XXXXXX";
  std::string dir = mkdtemp(dir_template);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      try {
        run_member(rank, size, dir, max_bytes, use_tcp);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::string cleanup = "rm -rf " + dir;
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  return failures == 0 ? 0 : 1;
}
