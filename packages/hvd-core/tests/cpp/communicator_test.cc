// communicator_test.cc - every collective on every transport (solo at one
// member, shm, tcp, hierarchical over two fake hosts) x world size x element
// count x op x dtype against a serial reference, Adasum over the transports,
// plus failure behaviour: abort, a departed member and a silent member turn
// into kInternal, never a hang.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adasum/adasum.h"
#include "auth/hmac_sha256.h"
#include "file_store.h"
#include "transport/shm/shm_communicator.h"
#include "transport/shm/shm_copy.h"
#include "common/error.h"
#include "net/connection_manager.h"
#include "reduce/reduce.h"
#include "rendezvous/store.h"
#include "test_harness.h"
#include "transport/communicator.h"

using namespace hvd;

namespace {

enum class Transport { kShm, kTcp, kHierarchical, kHierarchicalInterleaved };

const char* transport_label(Transport t) {
  switch (t) {
    case Transport::kShm: return "shm";
    case Transport::kTcp: return "tcp";
    case Transport::kHierarchical: return "hierarchical";
    case Transport::kHierarchicalInterleaved: return "hierarchical-interleaved";
  }
  return "?";
}

std::atomic<int> g_world_counter{0};

// One thread per member, each with its own ConnectionManager and
// communicator built through create_communicator, as a process would.
void run_world(Transport transport, int size, double timeout_seconds,
               const std::function<void(Communicator&, int)>& body,
               const std::function<void(CommOptions&)>& adjust = nullptr) {
  MemoryStore store;
  std::string key = "test" + std::to_string(g_world_counter.fetch_add(1)) + "-" + random_hex(8);
  ::hvd_test::run_members(size, [&](int member) {
    ConnectionManager connections(member, "job-secret", "127.0.0.1", timeout_seconds);
    store.set(key + "/addr/" + std::to_string(member), connections.address());
    std::vector<std::string> addresses;
    for (int m = 0; m < size; ++m) addresses.push_back(store.get(key + "/addr/" + std::to_string(m), 10.0));
    connections.set_peer_addresses(addresses);
    CommOptions options;
    options.key = key;
    options.rank = member;
    options.timeout_seconds = timeout_seconds;
    for (int m = 0; m < size; ++m) {
      options.global_ranks.push_back(m);
      switch (transport) {
        case Transport::kShm: options.hosts.push_back("localhost"); break;
        case Transport::kTcp:
          options.hosts.push_back("localhost");
          options.allow_shm = false;
          break;
        case Transport::kHierarchical: options.hosts.push_back(m < size / 2 ? "a" : "b"); break;
        case Transport::kHierarchicalInterleaved: options.hosts.push_back(m % 2 ? "b" : "a"); break;
      }
    }
    if (adjust) adjust(options);
    std::unique_ptr<Communicator> comm = create_communicator(options, store, &connections);
    body(*comm, member);
    // Keep every link open until all members are done with it.
    store.add(key + "/done", 1);
    while (std::stoll(store.get(key + "/done", 10.0)) < size) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
}

// Small integers, so every dtype and every reduction order is exact.
double input_value(int member, size_t i, ReduceOp op, DataType dtype) {
  if (dtype == DataType::kBool) return static_cast<double>((i + member) % 3 == 0);
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {1, -1, 2, 1, -2, 1, 1};
    return kFactors[(i * 3 + member * 5) % 7];
  }
  double v = static_cast<double>(static_cast<int>((i * 7 + member * 13) % 9) - 4);
  if (dtype == DataType::kUInt8 || dtype == DataType::kUInt16) v += 4;
  return v;
}

void store_value(void* buf, size_t i, DataType dtype, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(buf)[i] = v != 0; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    default: ::hvd_test::fail(__FILE__, __LINE__, "dtype not covered by the test");
  }
}

double load_value(const void* buf, size_t i, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    default: return 0;
  }
}

double reference(int size, size_t i, ReduceOp op, DataType dtype) {
  double acc = input_value(0, i, op, dtype);
  for (int m = 1; m < size; ++m) {
    double v = input_value(m, i, op, dtype);
    if (dtype == DataType::kBool) {
      acc = (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (acc != 0 || v != 0) : (acc != 0 && v != 0);
      continue;
    }
    switch (op) {
      case ReduceOp::kSum: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  return acc;
}

void check_reduced(const void* buf, size_t begin, size_t count, int size, ReduceOp op, DataType dtype,
                   const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    double expected = reference(size, begin + i, op, dtype);
    double got = load_value(buf, i, dtype);
    if (got != expected) {
      ::hvd_test::fail(__FILE__, __LINE__, what + ": element " + std::to_string(begin + i) + " is " +
                                               std::to_string(got) + ", expected " + std::to_string(expected));
    }
  }
}

std::string label(Transport t, int size, const char* collective, DataType dtype, ReduceOp op, size_t count) {
  return std::string(transport_label(t)) + " P=" + std::to_string(size) + " " + collective + " " +
         dtype_name(dtype) + " " + reduce_op_name(op) + " n=" + std::to_string(count);
}

void exercise_all_collectives(Transport transport, int size,
                              const std::function<void(CommOptions&)>& adjust = nullptr) {
  const size_t kCounts[] = {0, 1, 7, 1000, 300000};
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16,
                              DataType::kBFloat16, DataType::kInt8, DataType::kFloat64};
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  run_world(transport, size, 10.0, [&](Communicator& comm, int me) {
    // allreduce
    for (size_t count : kCounts) {
      for (DataType dtype : kDtypes) {
        for (ReduceOp op : kOps) {
          if (count > 1000 && op != ReduceOp::kSum && dtype != DataType::kFloat32) continue;
          std::vector<unsigned char> buf(count * dtype_size(dtype) + 1);
          for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, dtype, input_value(me, i, op, dtype));
          comm.allreduce(buf.data(), count, dtype, op);
          check_reduced(buf.data(), 0, count, size, op, dtype, label(transport, size, "allreduce", dtype, op, count));
        }
      }
    }
    for (ReduceOp op : kOps) {
      std::vector<uint8_t> flags(1001);
      for (size_t i = 0; i < flags.size(); ++i) store_value(flags.data(), i, DataType::kBool, input_value(me, i, op, DataType::kBool));
      comm.allreduce(flags.data(), flags.size(), DataType::kBool, op);
      check_reduced(flags.data(), 0, flags.size(), size, op, DataType::kBool,
                    label(transport, size, "allreduce", DataType::kBool, op, flags.size()));
    }

    // reducescatter with uneven blocks, including empty ones.
    for (size_t base : {size_t(0), size_t(3), size_t(70000)}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
        std::vector<size_t> counts(size);
        for (int m = 0; m < size; ++m) counts[m] = base == 0 ? 0 : base + (m * 37 % 5) - (m == 1 ? base : 0);
        size_t total = 0;
        for (size_t c : counts) total += c;
        std::vector<unsigned char> in(total * dtype_size(dtype) + 1);
        for (size_t i = 0; i < total; ++i) store_value(in.data(), i, dtype, input_value(me, i, ReduceOp::kSum, dtype));
        std::vector<unsigned char> out(counts[me] * dtype_size(dtype) + 1);
        comm.reducescatter(in.data(), out.data(), counts, dtype, ReduceOp::kSum);
        size_t offset = 0;
        for (int m = 0; m < me; ++m) offset += counts[m];
        check_reduced(out.data(), offset, counts[me], size, ReduceOp::kSum, dtype,
                      label(transport, size, "reducescatter", dtype, ReduceOp::kSum, total));
      }
    }

    // allgatherv with uneven (and some empty) contributions.
    for (size_t base : {size_t(0), size_t(5), size_t(700001)}) {
      std::vector<size_t> bytes(size);
      for (int m = 0; m < size; ++m) bytes[m] = (m == size - 1 && size > 1) ? 0 : base + m * 3;
      std::vector<unsigned char> in(bytes[me] + 1);
      for (size_t i = 0; i < bytes[me]; ++i) in[i] = static_cast<unsigned char>(i * 31 + me * 7);
      size_t total = 0;
      for (size_t b : bytes) total += b;
      std::vector<unsigned char> out(total + 1, 0xee);
      comm.allgatherv(in.data(), out.data(), bytes);
      size_t offset = 0;
      for (int m = 0; m < size; ++m) {
        for (size_t i = 0; i < bytes[m]; ++i) {
          if (out[offset + i] != static_cast<unsigned char>(i * 31 + m * 7)) {
            ::hvd_test::fail(__FILE__, __LINE__, std::string(transport_label(transport)) + " allgatherv wrong byte " +
                                                     std::to_string(i) + " of member " + std::to_string(m));
          }
        }
        offset += bytes[m];
      }
    }

    // broadcast from every root, small and larger than the shm arena.
    for (size_t bytes : {size_t(0), size_t(5), size_t(100000), size_t(3 * 1024 * 1024 + 3)}) {
      for (int root = 0; root < size; ++root) {
        std::vector<unsigned char> buf(bytes + 1, 0);
        if (me == root) for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<unsigned char>(i * 13 + root);
        comm.broadcast(buf.data(), bytes, root);
        for (size_t i = 0; i < bytes; ++i) {
          if (buf[i] != static_cast<unsigned char>(i * 13 + root)) {
            ::hvd_test::fail(__FILE__, __LINE__, std::string(transport_label(transport)) + " broadcast from " +
                                                     std::to_string(root) + " wrong at " + std::to_string(i));
          }
        }
      }
    }

    // alltoallv: member s sends (s + 2d) * scale bytes to member d.
    for (size_t scale : {size_t(0), size_t(1), size_t(50001)}) {
      std::vector<size_t> send(size), recv(size);
      for (int d = 0; d < size; ++d) send[d] = (me + 2 * d) * scale;
      for (int s = 0; s < size; ++s) recv[s] = (s + 2 * me) * scale;
      size_t send_total = 0, recv_total = 0;
      for (int m = 0; m < size; ++m) {
        send_total += send[m];
        recv_total += recv[m];
      }
      std::vector<unsigned char> in(send_total + 1), out(recv_total + 1, 0);
      size_t offset = 0;
      for (int d = 0; d < size; ++d) {
        for (size_t i = 0; i < send[d]; ++i) in[offset + i] = static_cast<unsigned char>(me * 16 + d + i);
        offset += send[d];
      }
      comm.alltoallv(in.data(), send, out.data(), recv);
      offset = 0;
      for (int s = 0; s < size; ++s) {
        for (size_t i = 0; i < recv[s]; ++i) {
          if (out[offset + i] != static_cast<unsigned char>(s * 16 + me + i)) {
            ::hvd_test::fail(__FILE__, __LINE__, std::string(transport_label(transport)) + " alltoallv from " +
                                                     std::to_string(s) + " wrong at " + std::to_string(i));
          }
        }
        offset += recv[s];
      }
    }

    for (int i = 0; i < 20; ++i) comm.barrier();
  }, adjust);
}

}  // namespace

#define HVD_COLLECTIVES_TEST(transport, size)                                        \
  HVD_TEST(transport##_collectives_match_serial_reference_at_##size##_members) {    \
    exercise_all_collectives(Transport::k##transport, size);                         \
  }

HVD_COLLECTIVES_TEST(Shm, 1)
HVD_COLLECTIVES_TEST(Shm, 2)
HVD_COLLECTIVES_TEST(Shm, 3)
HVD_COLLECTIVES_TEST(Shm, 4)
HVD_COLLECTIVES_TEST(Tcp, 2)
HVD_COLLECTIVES_TEST(Tcp, 3)
HVD_COLLECTIVES_TEST(Tcp, 4)
HVD_COLLECTIVES_TEST(Hierarchical, 4)
HVD_COLLECTIVES_TEST(HierarchicalInterleaved, 4)
HVD_COLLECTIVES_TEST(Hierarchical, 6)

HVD_TEST(hierarchical_collectives_stay_exact_with_either_stage_turned_off) {
  exercise_all_collectives(Transport::kHierarchical, 4, [](CommOptions& o) { o.hierarchical_allgather = false; });
  exercise_all_collectives(Transport::kHierarchical, 4, [](CommOptions& o) { o.hierarchical = false; });
}

// From 8 MiB the hierarchical allreduce is cut into chunks whose network
// stage runs on a second thread; uneven counts put shard and chunk edges
// in odd places. Every element is checked.
HVD_TEST(hierarchical_pipelined_allreduce_matches_serial_reference_across_chunk_edges) {
  struct Case {
    Transport transport;
    int size;
    DataType dtype;
    ReduceOp op;
    size_t count;
  };
  const Case cases[] = {
      {Transport::kHierarchical, 4, DataType::kFloat32, ReduceOp::kSum, (size_t{9} << 20) / 4 + 5},
      {Transport::kHierarchicalInterleaved, 4, DataType::kInt32, ReduceOp::kMax, (size_t{17} << 20) / 4 + 3},
      {Transport::kHierarchical, 6, DataType::kFloat64, ReduceOp::kMin, (size_t{12} << 20) / 8 + 7},
      {Transport::kHierarchical, 4, DataType::kFloat16, ReduceOp::kSum, (size_t{70} << 20) / 2 + 1},
  };
  for (const Case& c : cases) {
    run_world(c.transport, c.size, 10.0, [&](Communicator& comm, int me) {
      std::vector<unsigned char> buf(c.count * dtype_size(c.dtype));
      for (int round = 0; round < 2; ++round) {  // the second reuses the shard buffers
        for (size_t i = 0; i < c.count; ++i) store_value(buf.data(), i, c.dtype, input_value(me, i, c.op, c.dtype));
        comm.allreduce(buf.data(), c.count, c.dtype, c.op);
        check_reduced(buf.data(), 0, c.count, c.size, c.op, c.dtype,
                      label(c.transport, c.size, "pipelined allreduce", c.dtype, c.op, c.count));
      }
    });
  }
}

// Out of place: shared memory and hierarchical write the reduction straight
// into `out` and leave `in` alone; TCP declines and touches nothing.
HVD_TEST(allreduce_out_of_place_matches_the_reference_and_leaves_the_input) {
  const struct {
    Transport transport;
    int size;
    bool writes;
  } cases[] = {{Transport::kShm, 2, true}, {Transport::kShm, 3, true}, {Transport::kTcp, 2, false},
               {Transport::kHierarchical, 4, true}, {Transport::kHierarchicalInterleaved, 4, true}};
  const size_t counts[] = {1, 1000, 300001, (size_t{9} << 20) / 4 + 3};  // small, pipelined, staged in chunks
  for (const auto& c : cases) {
    run_world(c.transport, c.size, 10.0, [&](Communicator& comm, int me) {
      for (size_t count : counts) {
        std::vector<float> in(count), out(count, -100.0f);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(input_value(me, i, ReduceOp::kSum, DataType::kFloat32));
        const std::vector<float> original = in;
        const bool wrote = comm.allreduce_out_of_place(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
        const std::string what = label(c.transport, c.size, "allreduce_out_of_place", DataType::kFloat32,
                                       ReduceOp::kSum, count);
        EXPECT_EQ(wrote, c.writes);
        if (in != original) ::hvd_test::fail(__FILE__, __LINE__, what + ": the input changed");
        if (wrote) {
          check_reduced(out.data(), 0, count, c.size, ReduceOp::kSum, DataType::kFloat32, what);
        } else if (std::any_of(out.begin(), out.end(), [](float v) { return v != -100.0f; })) {
          ::hvd_test::fail(__FILE__, __LINE__, what + ": declined but wrote the output");
        }
      }
    });
  }
}

// Large shm allgathervs read the other members' pieces out of their memory
// (process_vm_readv); HVD_SHM_SINGLE_COPY=0 on member 0 keeps them on the
// slots. Both must give the same bytes, with uneven and empty pieces, in
// place (the input inside the output) and back to back with small ones
// (each call's published addresses and flags must not leak into the next).
// "deny-for-tests": members other than 0 cannot read the others' memory, so
// the first large call must fall back to the slots on every member together.
HVD_TEST(shm_allgatherv_single_copy_and_slots_give_the_same_bytes) {
  for (const char* single_copy : {"1", "0", "deny-for-tests"}) {
    ::setenv("HVD_SHM_SINGLE_COPY", single_copy, 1);
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        for (int round = 0; round < 6; ++round) {
          const size_t base = round % 2 ? 1000 : (size_t{1} << 20) + 4099 * round;
          std::vector<size_t> bytes(size);
          for (int m = 0; m < size; ++m) bytes[m] = (m == 1 && round % 3 == 0) ? 0 : base + 977 * m;
          std::vector<size_t> offsets(size, 0);
          for (int m = 1; m < size; ++m) offsets[m] = offsets[m - 1] + bytes[m - 1];
          std::vector<unsigned char> out(offsets[size - 1] + bytes[size - 1] + 1, 0xee);
          std::vector<unsigned char> separate(bytes[me]);
          const bool in_place = round >= 3;
          unsigned char* in = in_place ? out.data() + offsets[me] : separate.data();
          for (size_t i = 0; i < bytes[me]; ++i) in[i] = static_cast<unsigned char>(i * 13 + me * 5 + round);
          comm.allgatherv(in, out.data(), bytes);
          for (int m = 0; m < size; ++m) {
            for (size_t i = 0; i < bytes[m]; ++i) {
              if (out[offsets[m] + i] != static_cast<unsigned char>(i * 13 + m * 5 + round)) {
                ::hvd_test::fail(__FILE__, __LINE__, std::string("HVD_SHM_SINGLE_COPY=") + single_copy + " round " +
                                                         std::to_string(round) + ": wrong byte " + std::to_string(i) +
                                                         " of member " + std::to_string(m));
                return;
              }
            }
          }
          EXPECT_EQ(out.back(), static_cast<unsigned char>(0xee));
        }
      });
    }
  }
  ::unsetenv("HVD_SHM_SINGLE_COPY");
}

// Broadcasts from 4 MiB up go from the root's buffer straight into the
// others' (the root writes the head of each with process_vm_writev, each
// member reads the rest with process_vm_readv); with HVD_SHM_SINGLE_COPY=0
// and when members other than 0 may not copy ("deny-for-tests", the first
// large call falls back on every member together, whichever the root) they
// go through the slots. Every root, sizes that are no multiple of a slot or
// a page, back to back with small broadcasts: every member must end with the
// root's bytes (the head as well as the rest), and nothing past the end may
// change.
HVD_TEST(shm_large_broadcast_single_copy_and_slots_give_the_root_bytes) {
  for (const char* single_copy : {"1", "0", "deny-for-tests"}) {
    ::setenv("HVD_SHM_SINGLE_COPY", single_copy, 1);
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        for (int round = 0; round < 2 * size; ++round) {
          const int root = round % size;
          const size_t bytes = round % 2 ? 1000 + 7 * round : (size_t{4} << 20) + 4099 * round;
          std::vector<unsigned char> buf(bytes + 1, 0xee);
          for (size_t i = 0; i < bytes; ++i) {
            buf[i] = me == root ? static_cast<unsigned char>(i * 31 + round) : static_cast<unsigned char>(me);
          }
          comm.broadcast(buf.data(), bytes, root);
          for (size_t i = 0; i < bytes; ++i) {
            if (buf[i] != static_cast<unsigned char>(i * 31 + round)) {
              ::hvd_test::fail(__FILE__, __LINE__, std::string("HVD_SHM_SINGLE_COPY=") + single_copy + " P=" +
                                                       std::to_string(size) + " round " + std::to_string(round) +
                                                       ": wrong byte " + std::to_string(i) + " on member " +
                                                       std::to_string(me));
              return;
            }
          }
          EXPECT_EQ(buf.back(), static_cast<unsigned char>(0xee));
        }
      });
    }
  }
  ::unsetenv("HVD_SHM_SINGLE_COPY");
}

// Allreduces of 2 MiB up to 32 MiB among spinning members on shm are a
// reduce-scatter and an allgather that read the other members' buffers out
// of their processes (spinning forced, so that P=3 takes that path on 2
// CPUs too) with HVD_SHM_SINGLE_COPY=1; with
// HVD_SHM_SINGLE_COPY=0 they go through the slots, and with "deny-for-tests"
// the first one finds that members other than 0 may not read, and every
// member falls back to the slots together, before anyone wrote its output.
// Unset ("auto"), member 0 times both ways and every member follows its
// choice: a run of calls through the slots, one through the single copy,
// then whichever was faster; there members call in place or out of place
// independently (the route must not depend on it).
// Every dtype and op, in place and out of place, counts that P does not
// divide (uneven shares, each longer than one reduction chunk), back to back
// with small allreduces and an allgather (each call's published addresses
// must not leak into the next). Inputs are small integers, so every
// reduction order is exact and every member must hold the reference. The
// slots' runs take a few dtypes only (the first call is the one that falls
// back), to keep the test short.
HVD_TEST(shm_large_allreduce_single_copy_and_slots_match_the_reference) {
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt8,
                              DataType::kUInt8,   DataType::kBool,    DataType::kFloat16, DataType::kBFloat16};
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  for (const char* single_copy : {"1", "auto", "0", "deny-for-tests"}) {
    ::setenv("HVD_SHM_SINGLE_COPY", single_copy, 1);
    const bool timed = std::strcmp(single_copy, "auto") == 0;
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        int round = 0;
        int large_calls = 0;
        for (DataType dtype : kDtypes) {
          const bool few = std::strcmp(single_copy, "1") != 0 && !timed;
          if (few && dtype != DataType::kFloat32 && dtype != DataType::kFloat16 && dtype != DataType::kBool) continue;
          for (ReduceOp op : kOps) {
            if (dtype == DataType::kUInt8 && op == ReduceOp::kProduct) continue;  // the inputs have negative factors
            const size_t count = (size_t{2} << 20) / dtype_size(dtype) + 1 + 13 * static_cast<size_t>(round % 5);
            const bool in_place = (round + (timed ? me : 0)) % 2 == 0;
            ++round;
            ++large_calls;
            std::vector<unsigned char> in(count * dtype_size(dtype));
            std::vector<unsigned char> out(in.size() + 1, 0xee);
            for (size_t i = 0; i < count; ++i) store_value(in.data(), i, dtype, input_value(me, i, op, dtype));
            const std::vector<unsigned char> original = in;
            const std::string what = std::string("HVD_SHM_SINGLE_COPY=") + single_copy + " " +
                                     label(Transport::kShm, size, in_place ? "allreduce" : "allreduce_out_of_place",
                                           dtype, op, count);
            if (in_place) {
              comm.allreduce(in.data(), count, dtype, op);
              check_reduced(in.data(), 0, count, size, op, dtype, what);
            } else {
              EXPECT_TRUE(comm.allreduce_out_of_place(in.data(), out.data(), count, dtype, op));
              check_reduced(out.data(), 0, count, size, op, dtype, what);
              if (in != original) ::hvd_test::fail(__FILE__, __LINE__, what + ": the input changed");
              EXPECT_EQ(out.back(), static_cast<unsigned char>(0xee));
            }
            if (round % 8 == 0) {
              float small[3] = {1.0f, 2.0f, 3.0f};
              comm.allreduce(small, 3, DataType::kFloat32, ReduceOp::kSum);
              EXPECT_EQ(small[2], 3.0f * static_cast<float>(size));
              std::vector<unsigned char> gathered(static_cast<size_t>(size) << 18);
              std::vector<unsigned char> piece(size_t{1} << 18, static_cast<unsigned char>(me + 1));
              comm.allgatherv(piece.data(), gathered.data(), std::vector<size_t>(size, piece.size()));
              EXPECT_EQ(gathered.back(), static_cast<unsigned char>(size));
            }
          }
        }
        const uint64_t single = dynamic_cast<ShmCommunicator&>(comm).single_copy_allreduces();
        if (std::strcmp(single_copy, "1") == 0) {
          EXPECT_EQ(single, static_cast<uint64_t>(large_calls));
        } else if (timed) {
          // The first call and a run of four took the slots, the next run
          // of four the single copy.
          EXPECT_TRUE(single >= 4 && single <= static_cast<uint64_t>(large_calls - 5));
        } else {
          EXPECT_EQ(single, uint64_t{0});
        }
      }, [](CommOptions& options) { options.spin = true; });
    }
  }
  ::unsetenv("HVD_SHM_SINGLE_COPY");
}

namespace {

// A Sum allreduce on shm of `count` elements, in place or out of place,
// checked against the reference; `what` names the case in a failure.
void sum_and_check(Communicator& comm, int me, int size, DataType dtype, size_t count, bool in_place,
                   const std::string& what) {
  std::vector<unsigned char> in(count * dtype_size(dtype)), out(in.size());
  for (size_t i = 0; i < count; ++i) store_value(in.data(), i, dtype, input_value(me, i, ReduceOp::kSum, dtype));
  const std::string name = what + label(Transport::kShm, size, in_place ? "allreduce" : "allreduce_out_of_place",
                                        dtype, ReduceOp::kSum, count);
  if (in_place) {
    comm.allreduce(in.data(), count, dtype, ReduceOp::kSum);
    check_reduced(in.data(), 0, count, size, ReduceOp::kSum, dtype, name);
  } else {
    EXPECT_TRUE(comm.allreduce_out_of_place(in.data(), out.data(), count, dtype, ReduceOp::kSum));
    check_reduced(out.data(), 0, count, size, ReduceOp::kSum, dtype, name);
  }
}

}  // namespace

// The pipelined allreduce at every chunk autotune may set (the engine sets
// the same one on every member before a response): the default (a slot),
// a half and a quarter of it, and values it rounds (to a page, at most a
// slot), in place and out of place, over a count that no chunk divides;
// with ordinary and streaming stores (HVD_SHM_STREAM).
HVD_TEST(shm_pipelined_allreduce_matches_the_reference_at_every_chunk) {
  const size_t kChunks[] = {0, 256 * 1024, 128 * 1024, 5000, 1, size_t{1} << 30};
  for (const char* stream : {"0", "1"}) {
    ::setenv("HVD_SHM_STREAM", stream, 1);
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        EXPECT_EQ(comm.pipeline_chunk_default(), size_t{512} * 1024);  // the slot of members that spin
        int round = 0;
        for (size_t chunk : kChunks) {
          comm.set_pipeline_chunk_bytes(chunk);
          for (DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
            const size_t count = (size_t{1200} << 10) / dtype_size(dtype) + 7;
            sum_and_check(comm, me, size, dtype, count, round++ % 2 == 0,
                          std::string("HVD_SHM_STREAM=") + stream + " chunk " + std::to_string(chunk) + " ");
          }
        }
      }, [](CommOptions& options) { options.spin = true; });
    }
  }
  ::unsetenv("HVD_SHM_STREAM");
}

// A large allreduce through the slots goes in chunks of a whole slot (1
// MiB among members that yield, 512 KiB among members that spin) or of 256
// KiB, as member 0 timed the ways per size class, or as its HVD_SHM_CHUNK
// fixes it; every member must cut the same chunks on every call (a member
// that did not would wait at barriers the others never reach). Counts that
// no chunk divides, in three size classes in turn (the single copy off, so
// that 2 MiB goes through the slots where members spin), in place and out
// of place, ordinary and streaming stores; unset, member 0 tries each of
// the four ways for a run of four calls per class first.
HVD_TEST(shm_allreduce_in_slot_or_small_chunks_as_member_0_chose) {
  ::setenv("HVD_SHM_SINGLE_COPY", "0", 1);
  for (const char* chunk : {"slot", "small", "timed"}) {
    ::setenv("HVD_SHM_CHUNK", chunk, 1);
    for (bool spin : {false, true}) {
      for (int size : {2, 3}) {
        std::vector<uint64_t> smalls(static_cast<size_t>(size));
        const int kCallsPerClass = 18;
        run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
          EXPECT_EQ(comm.pipeline_chunk_default(), spin ? size_t{512} << 10 : size_t{1} << 20);  // the slot
          for (int call = 0; call < 3 * kCallsPerClass; ++call) {
            const size_t bytes = (size_t{512} << 10) << (call % 3);  // 512 KiB, 1 and 2 MiB
            const DataType dtype = call % 2 ? DataType::kFloat32 : DataType::kFloat16;
            const size_t count = bytes / dtype_size(dtype) + 3 + static_cast<size_t>(call);
            sum_and_check(comm, me, size, dtype, count, call % 4 < 2,
                          std::string("HVD_SHM_CHUNK=") + chunk + (spin ? " spinning" : " yielding") + " call " +
                              std::to_string(call) + " ");
          }
          smalls[static_cast<size_t>(me)] = dynamic_cast<ShmCommunicator&>(comm).small_chunk_allreduces();
        }, [&](CommOptions& options) { options.spin = spin; });
        for (uint64_t n : smalls) EXPECT_EQ(n, smalls[0]);  // the same chunks on every member
        const uint64_t calls = 3 * kCallsPerClass;
        if (std::strcmp(chunk, "slot") == 0) {
          EXPECT_EQ(smalls[0], uint64_t{0});
        } else if (std::strcmp(chunk, "small") == 0) {
          // The first call of each class goes before member 0 published a way.
          EXPECT_EQ(smalls[0], calls - 3);
        } else {
          // Per class: the first call and the runs of ways 0 and 1 (whole
          // slots), then those of ways 2 and 3 (small chunks), then the fastest.
          EXPECT_TRUE(smalls[0] >= 3 * 8 && smalls[0] <= calls - 3 * 9);
        }
      }
    }
  }
  ::unsetenv("HVD_SHM_CHUNK");
  ::unsetenv("HVD_SHM_SINGLE_COPY");
}

// allreduce_scaled on shm scales each member's share where it reduces it
// (the engine's Average and postscale_factor): the result must be, byte for
// byte, the unscaled allreduce followed by scale_buffer, on every path
// (small, pipelined, single-copy; P=2 and 3, so shares are uneven), every
// dtype, in place and out of place, with a factor that rounds (1/3) and one
// that saturates small integers (7.5). TCP cannot: false, nothing written.
HVD_TEST(shm_scaled_allreduce_equals_the_allreduce_scaled_afterwards) {
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt8,
                              DataType::kUInt8,   DataType::kBool,    DataType::kFloat16, DataType::kBFloat16};
  const size_t kBytes[] = {1000, 600 * 1024, (size_t{2} << 20) + 4096};  // small, pipelined, single-copy
  for (int size : {2, 3}) {
    run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
      int round = 0;
      for (size_t bytes : kBytes) {
        for (DataType dtype : kDtypes) {
          const double scale = round % 2 == 0 ? 1.0 / 3.0 : 7.5;
          const bool in_place = round++ % 3 == 0;
          const size_t count = bytes / dtype_size(dtype) + 5;
          std::vector<unsigned char> in(count * dtype_size(dtype)), expected(in.size());
          for (size_t i = 0; i < count; ++i) store_value(in.data(), i, dtype, input_value(me, i, ReduceOp::kSum, dtype));
          const std::vector<unsigned char> original = in;
          EXPECT_TRUE(comm.allreduce_out_of_place(in.data(), expected.data(), count, dtype, ReduceOp::kSum));
          scale_buffer(expected.data(), count, dtype, scale);
          std::vector<unsigned char> out(in.size() + 1, 0xee);
          unsigned char* result = in_place ? in.data() : out.data();
          EXPECT_TRUE(comm.allreduce_scaled(in.data(), result, count, dtype, ReduceOp::kSum, scale));
          const std::string what = label(Transport::kShm, size, in_place ? "allreduce_scaled (in place)"
                                                                         : "allreduce_scaled", dtype, ReduceOp::kSum,
                                         count) + " by " + std::to_string(scale);
          if (std::memcmp(result, expected.data(), expected.size()) != 0) {
            ::hvd_test::fail(__FILE__, __LINE__, what + ": differs from the allreduce scaled afterwards");
          }
          if (!in_place && in != original) ::hvd_test::fail(__FILE__, __LINE__, what + ": the input changed");
          if (!in_place) EXPECT_EQ(out.back(), static_cast<unsigned char>(0xee));
        }
      }
    }, [](CommOptions& options) { options.spin = true; });
  }
  run_world(Transport::kTcp, 2, 10.0, [&](Communicator& comm, int me) {
    float data[4] = {1.0f, 2.0f, 3.0f, static_cast<float>(me)};
    EXPECT_TRUE(!comm.allreduce_scaled(data, data, 4, DataType::kFloat32, ReduceOp::kSum, 0.5));
    EXPECT_EQ(data[3], static_cast<float>(me));
  });
}

// allreduce_parts of `count` elements whose parts are, in turn, as long as
// `runs` says, each member putting some parts' results in place and others
// elsewhere (and now and then all of them in one buffer of its own, so that
// the members' layouts differ): the result must be, byte for byte,
// allreduce_scaled of the packed array (and the reference where unscaled);
// inputs reduced out of place stay as they were. `round` picks the scale
// and the one-buffer members.
void check_allreduce_parts(Communicator& comm, int me, int size, DataType dtype, size_t count,
                           const std::vector<size_t>& runs, int round, const std::string& context) {
  const size_t esize = dtype_size(dtype);
  const double scale = round % 2 == 0 ? 1.0 : 1.0 / 3.0;
  std::vector<unsigned char> packed(count * esize), expected(packed.size());
  std::vector<std::vector<unsigned char>> inputs, outputs;  // the parts' own memory
  std::vector<ArrayPart> in_parts, out_parts;
  std::vector<bool> in_place;
  for (size_t first = 0, k = 0; first < count; ++k) {
    const size_t n = std::min(runs[k % runs.size()], count - first);
    inputs.emplace_back(n * esize);
    for (size_t i = 0; i < n; ++i) {
      const double v = input_value(me, first + i, ReduceOp::kSum, dtype);
      store_value(inputs.back().data(), i, dtype, v);
      store_value(packed.data(), first + i, dtype, v);
    }
    in_place.push_back((k + static_cast<size_t>(me)) % 2 == 0);
    outputs.emplace_back(in_place.back() ? 0 : n * esize + 1, 0xee);
    first += n;
  }
  const std::vector<std::vector<unsigned char>> original = inputs;
  for (size_t k = 0, first = 0; k < inputs.size(); ++k) {
    const size_t n = inputs[k].size() / esize;
    in_parts.push_back({inputs[k].data(), first, n});
    out_parts.push_back({in_place[k] ? inputs[k].data() : outputs[k].data(), first, n});
    first += n;
  }
  std::vector<unsigned char> whole;
  if ((round + me) % 3 == 0) {
    whole.assign(count * esize + 1, 0xee);
    out_parts.assign(1, ArrayPart{whole.data(), 0, count});
    in_place.assign(in_place.size(), false);
  }
  EXPECT_TRUE(comm.allreduce_scaled(packed.data(), expected.data(), count, dtype, ReduceOp::kSum, scale));
  comm.allreduce_parts(in_parts, out_parts, count, dtype, ReduceOp::kSum, scale);
  const std::string what = context + " " + label(Transport::kShm, size, "allreduce_parts", dtype, ReduceOp::kSum, count) +
                           " in " + std::to_string(inputs.size()) + " parts by " + std::to_string(scale) +
                           (whole.empty() ? "" : " into one buffer");
  for (size_t k = 0; k < out_parts.size(); ++k) {
    const ArrayPart& part = out_parts[k];
    if (scale == 1.0) check_reduced(part.data, part.first, part.count, size, ReduceOp::kSum, dtype, what);
    if (std::memcmp(part.data, expected.data() + part.first * esize, part.count * esize) != 0) {
      ::hvd_test::fail(__FILE__, __LINE__, what + ": part " + std::to_string(k) + " (elements " +
                                               std::to_string(part.first) + "..) differs");
      break;
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!in_place[k] && (inputs[k] != original[k] || (whole.empty() && outputs[k].back() != 0xee))) {
      ::hvd_test::fail(__FILE__, __LINE__, what + ": part " + std::to_string(k) +
                                               " changed its input or wrote past its output");
      break;
    }
  }
  if (!whole.empty()) EXPECT_EQ(whole.back(), static_cast<unsigned char>(0xee));
}

// A fused allreduce's piece reduced where its tensors lie (the executor's
// allreduce_in_pieces): parts of one element up to several chunks, every
// dtype, P=2 and 3, at the default chunk and at one that cuts parts and
// shares anywhere (check_allreduce_parts). Small sizes and TCP say no. With
// what the others read written by ordinary stores and by streaming ones
// (HVD_SHM_STREAM=0 / 1; unset, both in turn), parts that start anywhere in
// a vector.
HVD_TEST(shm_allreduce_parts_equals_the_allreduce_of_the_packed_array) {
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt8,
                              DataType::kUInt8,   DataType::kBool,    DataType::kFloat16, DataType::kBFloat16};
  const std::vector<size_t> kRuns = {1, 3, 1000, 17, 70000, 64, 5, 200000};  // part lengths, in turn
  for (const char* stream : {"0", "1", "auto"}) {
    ::setenv("HVD_SHM_STREAM", stream, 1);
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        EXPECT_TRUE(!comm.allreduces_parts(1000));
        EXPECT_TRUE(comm.allreduces_parts(512 * 1024));
        EXPECT_TRUE(comm.allreduces_parts(size_t{4} << 20));
        EXPECT_TRUE(comm.allreduces_parts(size_t{64} << 20));
        int round = 0;
        for (size_t chunk : {size_t{0}, size_t{5000}}) {
          comm.set_pipeline_chunk_bytes(chunk);
          for (DataType dtype : kDtypes) {
            check_allreduce_parts(comm, me, size, dtype, 700 * 1024 / dtype_size(dtype) + 11, kRuns, round++,
                                  std::string("HVD_SHM_STREAM=") + stream + " chunk " + std::to_string(chunk));
          }
        }
      }, [](CommOptions& options) { options.spin = true; });
    }
  }
  ::unsetenv("HVD_SHM_STREAM");
  run_world(Transport::kTcp, 2, 10.0, [&](Communicator& comm, int) { EXPECT_TRUE(!comm.allreduces_parts(512 * 1024)); });
}

// In the single copy's window (2-32 MiB, members that spin) a fused
// allreduce goes in one piece (fused_piece_bytes), and allreduce_parts
// reads the other members' parts where they lie: with
// HVD_SHM_SINGLE_COPY=1 every call through the single copy, with =0 none,
// with "deny-for-tests" the first call finds that members other than 0 may
// not read and all fall back to the slots together (before anyone wrote),
// unset as member 0 timed the two ways. Parts long and short (thousands of
// them: more than one process_vm_readv takes at once), members whose
// layouts differ (check_allreduce_parts), back to back with a small
// allreduce, P=2 and 3.
HVD_TEST(shm_allreduce_parts_in_the_single_copy_window_read_the_parts_where_they_lie) {
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kFloat64};
  const std::vector<std::vector<size_t>> kRuns = {{1, 3, 700, 17, 64, 5}, {300000, 1, 90001}};
  for (const char* single_copy : {"1", "0", "deny-for-tests", "auto"}) {
    ::setenv("HVD_SHM_SINGLE_COPY", single_copy, 1);
    for (int size : {2, 3}) {
      run_world(Transport::kShm, size, 10.0, [&](Communicator& comm, int me) {
        EXPECT_EQ(comm.fused_piece_bytes(size_t{2} << 20),
                  std::strcmp(single_copy, "0") == 0 ? size_t{512} << 10 : size_t{2} << 20);
        EXPECT_EQ(comm.fused_piece_bytes((size_t{2} << 20) - 1), size_t{512} << 10);
        EXPECT_EQ(comm.fused_piece_bytes(size_t{32} << 20), size_t{512} << 10);
        int round = 0;
        for (DataType dtype : kDtypes) {
          for (const std::vector<size_t>& runs : kRuns) {
            const size_t count = (size_t{2} << 20) / dtype_size(dtype) + 13 + 7 * static_cast<size_t>(round);
            // Each call is also timed packed (allreduce_scaled), which takes the same route.
            check_allreduce_parts(comm, me, size, dtype, count, runs, round++,
                                  std::string("HVD_SHM_SINGLE_COPY=") + single_copy);
            float small[3] = {1.0f, 2.0f, 3.0f};
            comm.allreduce(small, 3, DataType::kFloat32, ReduceOp::kSum);
            EXPECT_EQ(small[2], 3.0f * static_cast<float>(size));
          }
        }
        const uint64_t single = dynamic_cast<ShmCommunicator&>(comm).single_copy_allreduces();
        if (std::strcmp(single_copy, "1") == 0) {
          EXPECT_EQ(single, static_cast<uint64_t>(2 * round));
        } else if (std::strcmp(single_copy, "auto") == 0) {
          EXPECT_TRUE(single >= 4);
        } else {
          EXPECT_EQ(single, uint64_t{0});
        }
        // "deny-for-tests" agreed on the slots at the first call: whole pieces no more.
        if (std::strcmp(single_copy, "deny-for-tests") == 0) {
          EXPECT_EQ(comm.fused_piece_bytes(size_t{4} << 20), size_t{512} << 10);
        }
      }, [](CommOptions& options) { options.spin = true; });
    }
  }
  ::unsetenv("HVD_SHM_SINGLE_COPY");
}

HVD_TEST(create_communicator_picks_transport_from_hosts_and_options) {
  auto name_for = [](Transport t, int size) {
    std::string name;
    std::mutex mu;
    run_world(t, size, 5.0, [&](Communicator& comm, int me) {
      if (me == 0) {
        std::lock_guard<std::mutex> lock(mu);
        name = comm.transport_name();
      }
    });
    return name;
  };
  EXPECT_EQ(name_for(Transport::kShm, 1), std::string("LOCAL"));  // one member: solo, whatever else
  EXPECT_EQ(name_for(Transport::kTcp, 1), std::string("LOCAL"));
  EXPECT_EQ(name_for(Transport::kShm, 2), std::string("shm"));
  EXPECT_EQ(name_for(Transport::kTcp, 2), std::string("tcp"));
  EXPECT_EQ(name_for(Transport::kHierarchical, 4), std::string("hierarchical(shm+tcp)"));
  EXPECT_EQ(name_for(Transport::kHierarchical, 2), std::string("tcp"));  // one member per host
  EXPECT_EQ(name_for(Transport::kHierarchical, 3), std::string("tcp"));  // uneven hosts
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Member `victim` misbehaves via `victim_action`; every other member runs an
// allreduce (`survivor_call` on its data, comm.allreduce by default) and
// must get kInternal within `limit` seconds.
void expect_survivors_fail(Transport transport, int size, double timeout, double limit,
                           const std::function<void(Communicator&)>& victim_action,
                           const std::string& message_part, size_t count = 100000,
                           const std::function<void(Communicator&, std::vector<float>&)>& survivor_call = nullptr) {
  run_world(transport, size, timeout, [&](Communicator& comm, int me) {
    if (me == size - 1) {
      victim_action(comm);
      return;
    }
    std::vector<float> data(count, 1.0f);
    auto start = std::chrono::steady_clock::now();
    bool threw = false;
    try {
      for (int i = 0; i < 3; ++i) {
        if (survivor_call) survivor_call(comm, data);
        else comm.allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
      }
    } catch (const Error& e) {
      threw = true;
      EXPECT_TRUE(e.code() == ErrorCode::kInternal);
      if (!message_part.empty() && std::string(e.what()).find(message_part) == std::string::npos) {
        ::hvd_test::fail(__FILE__, __LINE__, std::string("error does not mention '") + message_part + "': " + e.what());
      }
    }
    EXPECT_TRUE(threw);
    double took = seconds_since(start);
    if (took > limit) {
      ::hvd_test::fail(__FILE__, __LINE__, "survivor took " + std::to_string(took) + " s to fail");
    }
  });
}

}  // namespace

HVD_TEST(shm_abort_by_one_member_fails_everyone_promptly) {
  expect_survivors_fail(Transport::kShm, 3, 20.0, 2.0, [](Communicator& c) { c.abort("test abort"); }, "test abort");
}

HVD_TEST(tcp_abort_by_one_member_fails_everyone_promptly) {
  expect_survivors_fail(Transport::kTcp, 3, 20.0, 2.0, [](Communicator& c) { c.abort("test abort"); }, "");
}

HVD_TEST(hierarchical_abort_by_one_member_fails_everyone_promptly) {
  expect_survivors_fail(Transport::kHierarchical, 4, 20.0, 2.0, [](Communicator& c) { c.abort("test abort"); }, "");
}

// 32 MiB: pipelined. The victim aborts while chunks are in flight, so the
// failure reaches each survivor in one stage while its other thread is in
// the other (the victim is one member's local peer and another's
// cross-host peer); both stages must give up at once.
HVD_TEST(hierarchical_pipelined_allreduce_fails_everyone_promptly_when_a_member_aborts_midway) {
  const size_t count = size_t{8} << 20;
  expect_survivors_fail(
      Transport::kHierarchical, 4, 20.0, 2.0,
      [count](Communicator& c) {
        std::thread aborter([&c] {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          c.abort("test abort");
        });
        std::vector<float> data(count, 1.0f);
        try {
          c.allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
        } catch (const Error&) {
        }
        aborter.join();
      },
      "", count);
}

HVD_TEST(hierarchical_pipelined_allreduce_times_out_when_a_member_is_silent) {
  expect_survivors_fail(Transport::kHierarchical, 4, 1.0, 4.0,
                        [](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); }, "",
                        size_t{4} << 20);
}

HVD_TEST(shm_silent_member_times_out_naming_it) {
  expect_survivors_fail(Transport::kShm, 2, 1.0, 4.0,
                        [](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); },
                        "global rank 1");
}

// A fused allreduce's piece reduced where its tensors lie waits like any
// other: a silent member is named within the timeout, an abort midway
// reaches everyone at once.
HVD_TEST(shm_allreduce_parts_fails_promptly_when_a_member_is_silent_or_aborts) {
  auto in_parts = [](Communicator& comm, std::vector<float>& data) {
    // Three parts of the one buffer, in place.
    std::vector<ArrayPart> parts;
    auto* bytes = reinterpret_cast<unsigned char*>(data.data());
    const size_t third = data.size() / 3;
    for (size_t first = 0; first < data.size(); first += third) {
      const size_t n = std::min(third, data.size() - first);
      parts.push_back({bytes + first * sizeof(float), first, n});
    }
    EXPECT_TRUE(comm.allreduces_parts(data.size() * sizeof(float)));
    comm.allreduce_parts(parts, parts, data.size(), DataType::kFloat32, ReduceOp::kSum, 0.5);
  };
  // Through the slots, and (P=2: the members spin) in the single copy's window.
  for (size_t count : {size_t{512 * 1024 / sizeof(float)}, size_t{3 * 1024 * 1024 / sizeof(float)}}) {
    expect_survivors_fail(Transport::kShm, 2, 1.0, 4.0,
                          [](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); },
                          "global rank 1", count, in_parts);
    expect_survivors_fail(
        Transport::kShm, 3, 20.0, 2.0,
        [&](Communicator& c) {
          std::thread aborter([&c] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            c.abort("test abort");
          });
          std::vector<float> data(count, 1.0f);
          try {
            for (;;) in_parts(c, data);  // until the abort
          } catch (const Error&) {
          }
          aborter.join();
        },
        "test abort", count, [&](Communicator& c, std::vector<float>& data) {
          for (int i = 0; i < 1000000; ++i) in_parts(c, data);  // calls are in flight when the abort comes
        });
  }
}

HVD_TEST(tcp_silent_member_times_out_naming_it) {
  expect_survivors_fail(Transport::kTcp, 2, 1.0, 4.0,
                        [](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); },
                        "global rank 1");
}

HVD_TEST(destroyed_member_fails_survivors_on_shm_and_tcp) {
  for (Transport t : {Transport::kShm, Transport::kTcp}) {
    MemoryStore store;
    std::string key = "destroyed-" + random_hex(8);
    ::hvd_test::run_members(2, [&](int member) {
      ConnectionManager connections(member, "s", "127.0.0.1", 20.0);
      store.set(key + "/addr/" + std::to_string(member), connections.address());
      connections.set_peer_addresses({store.get(key + "/addr/0", 10), store.get(key + "/addr/1", 10)});
      CommOptions options;
      options.key = key;
      options.rank = member;
      options.global_ranks = {0, 1};
      options.hosts = {"h", "h"};
      options.allow_shm = t == Transport::kShm;
      options.timeout_seconds = 20.0;
      auto comm = create_communicator(options, store, &connections);
      if (member == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        comm.reset();
        return;
      }
      std::vector<float> data(10, 1.0f);
      auto start = std::chrono::steady_clock::now();
      EXPECT_THROWS_CODE(comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum),
                         ErrorCode::kInternal);
      EXPECT_TRUE(seconds_since(start) < 2.0);
    });
  }
}

HVD_TEST(abort_from_another_thread_unblocks_a_waiting_call) {
  for (Transport t : {Transport::kShm, Transport::kTcp}) {
    run_world(t, 2, 20.0, [&](Communicator& comm, int me) {
      if (me == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        return;  // never joins the allreduce
      }
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        comm.abort("shutting down");
      });
      float x = 1;
      auto start = std::chrono::steady_clock::now();
      EXPECT_THROWS_CODE(comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum), ErrorCode::kInternal);
      EXPECT_TRUE(seconds_since(start) < 0.6);
      aborter.join();
      // Every later call fails too.
      EXPECT_THROWS_CODE(comm.barrier(), ErrorCode::kInternal);
    });
  }
}

HVD_TEST(shm_arena_name_is_unlinked_once_every_member_attached) {
  MemoryStore store;
  std::string key = "unlink-" + random_hex(8);
  std::string path = "/dev/shm/hvd-" + to_hex(sha256(key.data(), key.size())).substr(0, 40);
  ::hvd_test::run_members(3, [&](int member) {
    CommOptions options;
    options.key = key;
    options.rank = member;
    options.global_ranks = {0, 1, 2};
    options.hosts = {"h", "h", "h"};
    ShmCommunicator comm(options, store);
    comm.barrier();
    struct stat st;
    EXPECT_TRUE(::stat(path.c_str(), &st) != 0);  // nothing left to leak after a crash
    int64_t value = member + 1;
    comm.allreduce(&value, 1, DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(value, int64_t(6));
  });
}

// Small allreduces go through the slots, large ones read the other member's
// memory: both must fail promptly naming the dead member's pid.
HVD_TEST(shm_member_process_killed_fails_survivor_naming_its_pid) {
  for (size_t count : {size_t{1000}, size_t{4} << 20}) {
    char dir_template[] = "/tmp/hvd-test-XXXXXX";
    std::string dir = mkdtemp(dir_template);
    std::string key = "killed-" + random_hex(8);
    auto options_for = [&](int member) {
      CommOptions options;
      options.key = key;
      options.rank = member;
      options.global_ranks = {0, 1};
      options.hosts = {"h", "h"};
      options.timeout_seconds = 30.0;
      return options;
    };
    pid_t child = fork();
    if (child == 0) {
      // A member that vanishes without any cleanup, as after SIGKILL / OOM.
      try {
        hvd_test::FileStore store(dir);
        ShmCommunicator comm(options_for(1), store);
        comm.barrier();
        raise(SIGKILL);  // before the destructor could mark us as departed
      } catch (...) {
        _exit(2);
      }
      _exit(3);
    }
    hvd_test::FileStore store(dir);
    ShmCommunicator comm(options_for(0), store);
    comm.barrier();
    std::vector<float> data(count, 1.0f);
    auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      comm.allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::kInternal);
      message = e.what();
    }
    int status = 0;
    waitpid(child, &status, 0);
    std::string cleanup = "rm -rf " + dir;
    EXPECT_TRUE(std::system(cleanup.c_str()) == 0);
    if (message.find("pid " + std::to_string(child)) == std::string::npos) {
      ::hvd_test::fail(__FILE__, __LINE__, "error does not name the dead pid: " + message);
    }
    EXPECT_TRUE(seconds_since(start) < 2.0);
  }
}

namespace {

// Adasum over a transport, against what its definition gives in closed form:
// members with the same vector get that vector back, members with mutually
// orthogonal vectors get their sum. Two tensors are fused, each with its own
// weights: the first identical everywhere, the second orthogonal.
void expect_adasum_closed_forms(Transport transport, int size, DataType dtype) {
  const size_t same = 37, orthogonal = static_cast<size_t>(size) * 5;
  run_world(transport, size, 10.0, [&](Communicator& comm, int me) {
    std::vector<float> values(same + orthogonal, 0.0f);
    for (size_t i = 0; i < same; ++i) values[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    for (size_t i = 0; i < 5; ++i) values[same + static_cast<size_t>(me) * 5 + i] = static_cast<float>(me + 1);
    std::vector<unsigned char> buffer(values.size() * dtype_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == DataType::kFloat32) reinterpret_cast<float*>(buffer.data())[i] = values[i];
      else reinterpret_cast<uint16_t*>(buffer.data())[i] = float_to_half(values[i]);
    }
    Adasum adasum;
    adasum.allreduce(comm, buffer.data(), {same, orthogonal}, dtype);
    for (size_t i = 0; i < orthogonal; ++i) values[same + i] = static_cast<float>(i / 5 + 1);
    for (size_t i = 0; i < values.size(); ++i) {
      const float got = dtype == DataType::kFloat32 ? reinterpret_cast<float*>(buffer.data())[i]
                                                    : half_to_float(reinterpret_cast<uint16_t*>(buffer.data())[i]);
      if (std::fabs(got - values[i]) > 1e-3f) {
        ::hvd_test::fail(__FILE__, __LINE__, std::string(transport_label(transport)) + " adasum at " +
                                                 std::to_string(size) + " members: element " + std::to_string(i) +
                                                 " is " + std::to_string(got) + ", expected " +
                                                 std::to_string(values[i]));
        return;
      }
    }
  });
}

}  // namespace

HVD_TEST(adasum_gives_identical_vectors_back_and_sums_orthogonal_ones) {
  for (int size = 1; size <= 4; ++size) expect_adasum_closed_forms(Transport::kShm, size, DataType::kFloat32);
  expect_adasum_closed_forms(Transport::kTcp, 3, DataType::kFloat32);
  expect_adasum_closed_forms(Transport::kShm, 3, DataType::kFloat16);
}

// Large lane broadcasts and allgathers that the members read out of the
// writers' processes (HVD_SHM_LANE_BROADCAST=read): every member ends with
// the root's bytes (every member's, in member order), in place and out of
// place, the inputs untouched, and every call was read, not streamed. With
// reads refused to every member but 0 (HVD_SHM_SINGLE_COPY=deny-for-tests),
// the first call that could not be read streams instead, and every later
// one too.
HVD_TEST(shm_lane_broadcasts_and_allgathers_read_out_of_the_writers_exactly) {
  for (const char* single_copy : {"1", "deny-for-tests"}) {
    for (int size : {2, 3}) {
      setenv("HVD_SHM_LANE_BROADCAST", "read", 1);
      setenv("HVD_SHM_SINGLE_COPY", single_copy, 1);
      run_world(Transport::kShm, size, 30.0, [&](Communicator& comm, int me) {
        auto* shm = dynamic_cast<ShmCommunicator*>(&comm);
        EXPECT_TRUE(shm != nullptr);
        uint64_t occurrence = 0;
        auto value = [&](int member, size_t i) {
          return static_cast<unsigned char>(i * 7 + member * 31 + occurrence * 13 + (i >> 12));
        };
        auto expect_exact = [&](const unsigned char* got, size_t bytes, int member) {
          bool exact = true;
          for (size_t i = 0; i < bytes && exact; ++i) exact = got[i] == value(member, i);
          EXPECT_TRUE(exact);
        };
        for (size_t bytes : {size_t{40000}, size_t{1} << 20, ShmCommunicator::kLaneStreamBytes}) {
          // root -1: an allgather.
          for (int root = -1; root < size; ++root) {
            for (bool in_place : {false, true}) {
              if (root < 0 && in_place) continue;
              ++occurrence;
              std::vector<unsigned char> input(bytes), output(root < 0 ? bytes * size : bytes, 0xEE);
              for (size_t i = 0; i < bytes; ++i) input[i] = value(me, i);
              const std::vector<unsigned char> kept = input;
              void* out = in_place ? input.data() : output.data();
              const auto outcome =
                  root < 0 ? shm->lane_allgather(1, occurrence, input.data(), out, bytes, std::chrono::seconds(10))
                           : shm->lane_broadcast(2, occurrence, input.data(), out, bytes, root,
                                                 std::chrono::seconds(10));
              EXPECT_TRUE(outcome == ShmCommunicator::LaneOutcome::kDone);
              for (int m = 0; m < (root < 0 ? size : 1); ++m) {
                expect_exact(static_cast<const unsigned char*>(out) + m * bytes, bytes, root < 0 ? m : root);
              }
              if (!in_place) EXPECT_TRUE(input == kept);
            }
          }
        }
        const uint64_t calls = 3 * (static_cast<uint64_t>(size) * 2 + 1);
        EXPECT_EQ(shm->lane_reads(), std::strcmp(single_copy, "1") == 0 ? calls : uint64_t{0});
      });
      unsetenv("HVD_SHM_LANE_BROADCAST");
      unsetenv("HVD_SHM_SINGLE_COPY");
    }
  }
}

// shm_copy and shm_stream_copy switch from memcpy to their vector loops at
// 2 KiB and align the destination first: every size around the switch and
// the loops' block sizes, from and to every kind of misalignment, must copy
// exactly the bytes asked for and nothing past them.
HVD_TEST(shm_copy_copies_every_size_and_alignment_exactly) {
  const size_t sizes[] = {0, 1, 63, 2047, 2048, 2049, 2111, 2112, 4096 + 13, 65536 + 7, (1u << 20) + 3};
  const size_t offsets[] = {0, 1, 16, 33, 63};
  for (auto copy : {hvd::shm_copy, hvd::shm_stream_copy}) {
    for (size_t bytes : sizes) {
      std::vector<unsigned char> src(bytes + 128), dst(bytes + 256);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
      for (size_t from : offsets) {
        for (size_t to : offsets) {
          std::fill(dst.begin(), dst.end(), 0xAB);
          copy(dst.data() + 64 + to, src.data() + from, bytes);
          EXPECT_TRUE(std::memcmp(dst.data() + 64 + to, src.data() + from, bytes) == 0);
          bool guards = true;
          for (size_t i = 0; i < 64 + to; ++i) guards = guards && dst[i] == 0xAB;
          for (size_t i = 64 + to + bytes; i < dst.size(); ++i) guards = guards && dst[i] == 0xAB;
          EXPECT_TRUE(guards);
        }
      }
    }
  }
}
