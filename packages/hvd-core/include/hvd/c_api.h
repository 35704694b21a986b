/*
 * hvd/c_api.h - the whole public contract of libhvd_core.
 *
 * Plain C. Every binding (horovod.torch, horovod.tensorflow, ...) and every
 * downstream native user talks to the engine only through the functions
 * declared here. No C++, framework, MPI or CUDA type crosses this boundary;
 * tensors cross as DLPack descriptors (hvd/dlpack.h).
 *
 * Versioning
 *   HVD_API_MAJOR changes when an existing function, struct field or enum
 *   value changes meaning or is removed: callers must be rebuilt.
 *   HVD_API_MINOR changes when something is appended: a new function, a new
 *   field at the end of an argument struct, a new enum value. A caller built
 *   against any minor of the same major works with this library: the library
 *   reads `struct_size` of every argument struct and treats fields beyond it
 *   as absent (zero / default). Fields are only ever appended, never
 *   reordered. See docs/abi_changelog.md for what each minor added.
 *
 * Errors
 *   Functions that can fail return an `hvd_error*`: NULL on success, else an
 *   error object the caller owns and must pass to hvd_error_destroy(). Its
 *   code says what the caller must do next (see hvd_error_code); its message
 *   names the tensor and the ranks at fault. No C++ exception ever leaves
 *   this library.
 *
 * Threads
 *   All functions are thread-safe. Completion and allocation callbacks run
 *   on whichever thread is driving the process set's engine at that moment:
 *   its background thread, or a caller's thread inside hvd_handle_wait() (a
 *   waiting caller drives the engine itself, see HVD_ENQUEUE_CALLER_WAITS),
 *   possibly one waiting on a different handle. They must return quickly,
 *   must not wait on other handles, and must not assume a particular thread.
 *
 * Ownership is written on each field: "in" (caller keeps ownership),
 * "out" (written by the library), "borrowed until completion" (the caller
 * keeps the memory alive and unchanged until the handle completes).
 */
#ifndef HVD_C_API_H_
#define HVD_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "hvd/dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_API_MAJOR 1
#define HVD_API_MINOR 10

#if defined(_WIN32)
#define HVD_EXPORT __declspec(dllexport)
#else
#define HVD_EXPORT __attribute__((visibility("default")))
#endif

/* Size of an argument struct up to and including `last_field`: what a caller
 * stores in `struct_size`. The library checks at compile time that each
 * HVD_*_STRUCT_SIZE below names the struct's last field. */
#define HVD_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* Since 1.4: an initializer for any argument or output struct that sets its
 * struct_size and zeroes the rest, so it cannot be forgotten:
 *   hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
 * Each struct below has its own HVD_*_INIT. (C++ before C++20 has no
 * designated initializers, and a partial brace list draws
 * -Wmissing-field-initializers there, hence the lambda.) */
#ifdef __cplusplus
#define HVD_STRUCT_INIT(type, struct_size_value) \
  ([]() { type value_{}; value_.struct_size = (struct_size_value); return value_; }())
#else
#define HVD_STRUCT_INIT(type, struct_size_value) {.struct_size = (struct_size_value)}
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum hvd_error_code {
  HVD_SUCCESS = 0,
  /* Bad input on this rank (wrong dtype, non-contiguous tensor, bad root
   * rank, bad process set): nothing was enqueued; fix the call. */
  HVD_ERROR_INVALID_ARGUMENT = 1,
  /* hvd_init() has not been called (or hvd_shutdown() has). */
  HVD_ERROR_NOT_INITIALIZED = 2,
  /* The ranks disagree about a collective (shape, dtype, op, root rank,
   * scale factors, process set): every rank gets this error for that
   * tensor. The engine stays usable; later collectives work. */
  HVD_ERROR_PRECONDITION = 3,
  /* A peer died, a link broke, the job was shut down or a stall exceeded
   * HOROVOD_STALL_SHUTDOWN_TIME_SECONDS. Every pending and later collective
   * fails with this code. Call hvd_shutdown() and then hvd_init() again to
   * continue (elastic training). */
  HVD_ERROR_INTERNAL = 4,
  /* hvd_handle_wait() timed out; the operation is still in flight. */
  HVD_ERROR_TIMEOUT = 5,
  /* A tensor with this name is already in flight in this process set. */
  HVD_ERROR_DUPLICATE_NAME = 6,
  /* The engine does not support this dtype/op/device combination. */
  HVD_ERROR_UNSUPPORTED = 7
} hvd_error_code;

typedef struct hvd_error hvd_error; /* opaque */

HVD_EXPORT hvd_error_code hvd_error_get_code(const hvd_error* error);
/* The message stays valid until hvd_error_destroy(error). Not NUL-free:
 * use *length. A trailing NUL is present for convenience. */
HVD_EXPORT const char* hvd_error_get_message(const hvd_error* error,
                                             size_t* length /* out */);
HVD_EXPORT void hvd_error_destroy(hvd_error* error);
/* Since 1.4: what the error is about, for callers that act on it without
 * parsing the message. Valid until hvd_error_destroy(error).
 * The name of the tensor at fault ("", length 0, when the error is about no
 * single tensor): set for mismatches (HVD_ERROR_PRECONDITION) and duplicate
 * names. */
HVD_EXPORT const char* hvd_error_get_tensor_name(const hvd_error* error,
                                                 size_t* length /* out */);
/* Since 1.4: the global ranks that caused the error, ascending; writes at
 * most `capacity` to `ranks` and returns how many there are (0: none named).
 * HVD_ERROR_PRECONDITION: the ranks whose request differs from the one most
 * ranks made (ties: from the lowest rank's), or the joined ranks an operation
 * other than allreduce cannot run with. HVD_ERROR_INTERNAL: the peer that
 * died, froze, became unreachable, shut down or called hvd_abort(); every
 * rank of the process set when the ranks diverged. */
HVD_EXPORT size_t hvd_error_get_ranks(const hvd_error* error, int32_t* ranks,
                                      size_t capacity);

/* ------------------------------------------------------------------------ */
/* Library identity                                                         */
/* ------------------------------------------------------------------------ */

/* The API version the library was built with (not the header's). */
HVD_EXPORT void hvd_get_api_version(int32_t* major /* out */,
                                    int32_t* minor /* out */);
/* The package version, e.g. "0.1.0". Static storage. */
HVD_EXPORT const char* hvd_get_version_string(void);

/* ------------------------------------------------------------------------ */
/* Start-up and topology                                                    */
/* ------------------------------------------------------------------------ */

typedef struct hvd_init_args {
  size_t struct_size; /* HVD_INIT_ARGS_STRUCT_SIZE */
  /* Static process sets created at start-up, besides the global one (id 0).
   * Their rank lists are concatenated in `process_set_ranks`; the i-th set
   * has process_set_sizes[i] ranks. They get ids 1..num_process_sets in
   * order. All three may be 0/NULL. in. */
  const int32_t* process_set_ranks;
  const int32_t* process_set_sizes;
  size_t num_process_sets;
} hvd_init_args;
#define HVD_INIT_ARGS_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_init_args, num_process_sets)
#define HVD_INIT_ARGS_INIT HVD_STRUCT_INIT(hvd_init_args, HVD_INIT_ARGS_STRUCT_SIZE)

/* Joins the job described by the environment (HOROVOD_RANK, HOROVOD_SIZE,
 * ..., HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, HOROVOD_SECRET_KEY; or the MPI
 * launcher's rank variables). With none set, runs as rank 0 of 1.
 * `args` may be NULL. Calling it when already initialized is a no-op,
 * unless the engine has failed (hvd_get_async_error() says why): since 1.2
 * it is then shut down and a new one joins the job, collectively with the
 * other ranks, as hvd_shutdown() followed by hvd_init() would. */
HVD_EXPORT hvd_error* hvd_init(const hvd_init_args* args);
/* Stops the background threads and releases all resources; pending
 * operations fail with HVD_ERROR_INTERNAL. Idempotent. hvd_init() may be
 * called again afterwards. */
HVD_EXPORT hvd_error* hvd_shutdown(void);
HVD_EXPORT int32_t hvd_is_initialized(void);
/* Since 1.2. NULL while the engine works (or none is initialized); else the
 * error (HVD_ERROR_INTERNAL: a peer died or left, the ranks diverged, the job
 * was aborted) that ended it: every later collective fails the same way until
 * hvd_init() starts a new engine. The caller destroys the error. */
HVD_EXPORT hvd_error* hvd_get_async_error(void);

/* Since 1.4: ends this rank's engine now, as a failure would (NCCL's
 * ncclCommAbort): its pending and later collectives fail with
 * HVD_ERROR_INTERNAL naming this rank and `reason` (in; reason_len bytes,
 * may be 0), and so do those of the other ranks of every process set, at
 * once where the link is up, else within HOROVOD_PEER_TIMEOUT_SECONDS.
 * hvd_get_async_error() then returns that error and hvd_init() starts a new
 * engine. Does nothing when no engine runs. Safe from any thread, also from a
 * completion callback. */
HVD_EXPORT hvd_error* hvd_abort(const char* reason, size_t reason_len);

/* Since 1.5: what this library can do with CUDA tensors. Loads the CUDA
 * plugin (libhvd_core_cuda.so, next to this library; HVD_CUDA_PLUGIN
 * overrides) and NCCL (HVD_NCCL_LIBRARY overrides; else libnccl.so.2 as the
 * dynamic loader finds it, then each folder of HVD_NCCL_DIRS) on first call.
 * Needs no hvd_init(). */
typedef struct hvd_gpu_info {
  size_t struct_size;     /* in: HVD_GPU_INFO_STRUCT_SIZE */
  int32_t cuda_built;     /* out: 1 when the CUDA plugin is installed and loads */
  int32_t cuda_available; /* out: 1 when CUDA tensors can be enqueued (a device exists) */
  int32_t device_count;   /* out */
  int32_t nccl_version;   /* out: NCCL's version code (e.g. 22703), 0 when NCCL cannot be loaded */
  /* out: what was found ("CUDA runtime 13.0, driver 13.0, 1 device(s)"), or
   * why CUDA or NCCL is unavailable. Valid for the life of the process. */
  const char* message;
  size_t message_len;
} hvd_gpu_info;
#define HVD_GPU_INFO_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_gpu_info, message_len)
#define HVD_GPU_INFO_INIT HVD_STRUCT_INIT(hvd_gpu_info, HVD_GPU_INFO_STRUCT_SIZE)

HVD_EXPORT hvd_error* hvd_get_gpu_info(hvd_gpu_info* info /* in/out */);

typedef struct hvd_topology {
  size_t struct_size; /* in: HVD_TOPOLOGY_STRUCT_SIZE */
  int32_t rank;        /* out */
  int32_t size;        /* out */
  int32_t local_rank;  /* out */
  int32_t local_size;  /* out */
  int32_t cross_rank;  /* out */
  int32_t cross_size;  /* out */
  int32_t is_homogeneous; /* out: 1 when every host runs the same number of ranks */
} hvd_topology;
#define HVD_TOPOLOGY_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_topology, is_homogeneous)
#define HVD_TOPOLOGY_INIT HVD_STRUCT_INIT(hvd_topology, HVD_TOPOLOGY_STRUCT_SIZE)

HVD_EXPORT hvd_error* hvd_get_topology(hvd_topology* topology /* in/out */);

/* ------------------------------------------------------------------------ */
/* Process sets                                                             */
/* ------------------------------------------------------------------------ */

/* Adds a process set. Collective over all ranks of the job: every rank calls
 * it with the same ranks, in the same order of add/remove calls. Requires
 * HOROVOD_DYNAMIC_PROCESS_SETS=1 (as Horovod). */
HVD_EXPORT hvd_error* hvd_add_process_set(const int32_t* ranks, size_t num_ranks,
                                          int32_t* process_set_id /* out */);
/* Removes a process set (collective over all ranks). Id 0 cannot be removed. */
HVD_EXPORT hvd_error* hvd_remove_process_set(int32_t process_set_id);

typedef struct hvd_process_set_info {
  size_t struct_size;  /* in: HVD_PROCESS_SET_INFO_STRUCT_SIZE */
  int32_t process_set_id; /* in */
  int32_t rank;        /* out: this process's rank within the set, -1 if not a member */
  int32_t size;        /* out: number of ranks in the set */
  int32_t* ranks;      /* in, optional: buffer receiving the member ranks */
  size_t ranks_capacity; /* in: entries available in `ranks` */
  /* 1.8 */
  uint64_t fast_lane_calls; /* out: this rank's collectives of the set that ran
                               in the same-host fast lane, without negotiation
                               (allreduces, broadcasts, allgathers) */
  /* 1.10 */
  uint64_t request_batches; /* out: how often this rank's engine took the
                               collectives submitted to the set into
                               negotiation, all that were queued at once
                               (one request to the set's coordinator) */
} hvd_process_set_info;
#define HVD_PROCESS_SET_INFO_STRUCT_SIZE \
  HVD_STRUCT_SIZE(hvd_process_set_info, request_batches)
#define HVD_PROCESS_SET_INFO_INIT HVD_STRUCT_INIT(hvd_process_set_info, HVD_PROCESS_SET_INFO_STRUCT_SIZE)

HVD_EXPORT hvd_error* hvd_get_process_set_info(hvd_process_set_info* info /* in/out */);
/* Ids of all current process sets, ascending. Writes at most `capacity`;
 * *count receives the total. */
HVD_EXPORT hvd_error* hvd_get_process_set_ids(int32_t* ids, size_t capacity,
                                              size_t* count /* out */);

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

typedef enum hvd_collective {
  HVD_ALLREDUCE = 0,
  HVD_ALLGATHER = 1,     /* first dimension may differ across ranks */
  HVD_BROADCAST = 2,
  HVD_ALLTOALL = 3,      /* rows along the first dimension, per `splits` */
  HVD_REDUCESCATTER = 4, /* first dimension split as evenly as possible, lower ranks get the extra rows */
  HVD_BARRIER = 5,       /* no tensor */
  HVD_JOIN = 6           /* no tensor; result: the last rank to join */
} hvd_collective;

/* Values equal Horovod's op constants. */
typedef enum hvd_reduce_op {
  HVD_OP_AVERAGE = 0,
  HVD_OP_SUM = 1,
  HVD_OP_ADASUM = 2,
  HVD_OP_MIN = 3,
  HVD_OP_MAX = 4,
  HVD_OP_PRODUCT = 5
} hvd_reduce_op;

typedef struct hvd_handle hvd_handle; /* opaque */

/* Caller-supplied output allocation, used for results whose shape is known
 * only after negotiation (allgather, alltoall, reducescatter). Called on the
 * thread driving the engine (see "Threads" above) with the final shape; store the data pointer of a
 * compact row-major buffer of that shape and dtype in *data and return 0, or
 * return non-zero to fail the operation. The memory stays the caller's. */
typedef int32_t (*hvd_alloc_fn)(void* ctx, size_t tensor_index, int32_t ndim,
                                const int64_t* shape, DLDataType dtype,
                                void** data /* out */);

/* Called once, on the thread driving the engine (see "Threads" above), when
 * `handle` completes (success or error). The handle stays valid until hvd_handle_release().
 * The handle is marked complete just before the call (so hvd_handle_poll() and
 * hvd_handle_get_result() work inside it): a thread in hvd_handle_wait() may
 * return while on_done still runs, so keep on_done_ctx alive until on_done
 * has returned, not merely until the wait does. */
typedef void (*hvd_done_fn)(void* ctx, hvd_handle* handle);

typedef struct hvd_tensor_args {
  size_t struct_size; /* HVD_TENSOR_ARGS_STRUCT_SIZE */
  /* The tensor to send: compact row-major, on the CPU or (since 1.5, when
   * hvd_get_gpu_info() says cuda_available) a CUDA device; every tensor of a
   * group and its output on the same device. Borrowed until completion.
   * NULL for barrier and join. */
  const DLTensor* input;
  /* Allreduce and broadcast only, optional: where the result goes; same
   * shape and dtype as input; may be `input` itself (in place). Borrowed
   * until completion. When NULL the library allocates the result (or calls
   * `alloc`); fetch it with hvd_handle_get_result(). */
  DLTensor* output;
  /* Alltoall only, optional: number of first-dimension rows sent to each
   * rank of the process set (`num_splits` == set size). NULL: split evenly
   * (the first dimension must divide by the set size). in. */
  const int64_t* splits;
  size_t num_splits;
  /* Name, unique among this process set's in-flight operations and equal on
   * all ranks for the same collective (e.g. "allreduce.fc1.weight"). in. */
  const char* name;
  size_t name_len;
} hvd_tensor_args;
#define HVD_TENSOR_ARGS_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_tensor_args, name_len)
#define HVD_TENSOR_ARGS_INIT HVD_STRUCT_INIT(hvd_tensor_args, HVD_TENSOR_ARGS_STRUCT_SIZE)

typedef struct hvd_enqueue_args {
  size_t struct_size;     /* HVD_ENQUEUE_ARGS_STRUCT_SIZE */
  int32_t collective;     /* an hvd_collective */
  int32_t process_set_id; /* 0: the global set */
  int32_t reduce_op;      /* an hvd_reduce_op: allreduce, reducescatter */
  /* broadcast: the root. A rank of the process set (0..size-1) unless flags
   * has HVD_ENQUEUE_ROOT_RANK_GLOBAL: then a global rank, which must be a
   * member of the process set (Horovod's meaning). */
  int32_t root_rank;
  /* allreduce, reducescatter: multiply the inputs, the results. 0 means 1
   * (so a zeroed struct scales nothing) unless flags has
   * HVD_ENQUEUE_SCALE_FACTORS_AS_GIVEN: then 0 multiplies by zero. */
  double prescale_factor;
  double postscale_factor;
  /* One tensor, or several for a grouped collective: a group is negotiated
   * and executed as one unit. in; each entry as hvd_tensor_args says. Since
   * 1.4 the library steps through the array by the caller's element size:
   * tensors[0].struct_size rounded up to a multiple of alignof(size_t) (fields
   * appended to hvd_tensor_args never need more), which is the caller's
   * sizeof(hvd_tensor_args); every entry must have that struct_size. */
  const hvd_tensor_args* tensors;
  size_t num_tensors;
  hvd_alloc_fn alloc; /* optional */
  void* alloc_ctx;
  hvd_done_fn on_done; /* optional */
  void* on_done_ctx;
  /* Since 1.1: a bitwise or of hvd_enqueue_flags. */
  uint32_t flags;
  /* Since 1.5, CUDA tensors only: the cudaStream_t on which the caller's
   * framework produces the inputs (NULL: the legacy default stream). The
   * library's own stream waits for the work queued on it so far; the host
   * never blocks. Results are complete when the handle completes. */
  void* device_stream;
} hvd_enqueue_args;
#define HVD_ENQUEUE_ARGS_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_enqueue_args, device_stream)
#define HVD_ENQUEUE_ARGS_INIT HVD_STRUCT_INIT(hvd_enqueue_args, HVD_ENQUEUE_ARGS_STRUCT_SIZE)

typedef enum hvd_enqueue_flags {
  /* The caller will call hvd_handle_wait() on this handle right away. The
   * waiting thread then runs the engine itself, so the library does not wake
   * its background thread for this request (a thread hand-off costs more
   * than a small collective). Without the wait the operation still
   * completes, but may be delayed by up to 100 ms. */
  HVD_ENQUEUE_CALLER_WAITS = 1,
  /* Since 1.2: root_rank is a global rank (see hvd_enqueue_args). */
  HVD_ENQUEUE_ROOT_RANK_GLOBAL = 2,
  /* Since 1.3: the submitting thread cannot go on until this operation
   * completes, although it waits for on_done rather than calling
   * hvd_handle_wait() (e.g. a framework op executed eagerly). The engine
   * then counts the operation as waited on from its submission when it looks
   * for ranks blocked on collectives the others never submit (divergence,
   * reported as HVD_ERROR_INTERNAL after HOROVOD_PEER_TIMEOUT_SECONDS).
   * Leave it unset when the program can still submit other operations:
   * an operation with an on_done callback that nobody waits on then counts
   * as waited on only once it has been pending for
   * HOROVOD_STALL_CHECK_TIME_SECONDS. */
  HVD_ENQUEUE_SUBMITTER_BLOCKED = 4,
  /* Since 1.6: prescale_factor and postscale_factor are taken as given, 0
   * included (a framework's prescale_factor=0.0 must zero the result, as in
   * Horovod). Without it 0 still means 1. */
  HVD_ENQUEUE_SCALE_FACTORS_AS_GIVEN = 8
} hvd_enqueue_flags;

/* Validates the arguments and queues the operation; returns at once.
 * On success *handle receives a handle the caller must release. */
HVD_EXPORT hvd_error* hvd_enqueue(const hvd_enqueue_args* args,
                                  hvd_handle** handle /* out */);

/* 1 when the operation has completed (successfully or not), else 0. */
HVD_EXPORT int32_t hvd_handle_poll(const hvd_handle* handle);
/* Waits for completion. timeout_seconds < 0 waits forever. Returns NULL on
 * success, the operation's error, or HVD_ERROR_TIMEOUT (still in flight). */
HVD_EXPORT hvd_error* hvd_handle_wait(hvd_handle* handle, double timeout_seconds);

/* Since 1.7: hvd_enqueue() and hvd_handle_wait(timeout_seconds) in one call,
 * for synchronous callers of small collectives, which cost mostly call
 * overhead (set HVD_ENQUEUE_CALLER_WAITS so that the wait drives the engine).
 * - The operation completed within the timeout: its handle is already
 *   released, *handle is NULL, and the operation's error (NULL: success) is
 *   returned.
 * - It is still in flight: *handle receives its handle and NULL is returned;
 *   the caller goes on as after hvd_enqueue() (wait, then release).
 * - The enqueue failed: its error is returned and *handle is NULL. */
HVD_EXPORT hvd_error* hvd_enqueue_wait(const hvd_enqueue_args* args, double timeout_seconds,
                                       hvd_handle** handle /* out */);

typedef struct hvd_result {
  size_t struct_size;   /* in: HVD_RESULT_STRUCT_SIZE */
  size_t tensor_index;  /* in: which tensor of a group */
  /* out: the result tensor when the library allocated it (output == NULL
   * and no `alloc`): ownership passes to the caller, who calls its deleter.
   * Each result can be taken once; later calls get NULL. */
  DLManagedTensor* output;
  /* out: alltoall: rows received from each rank; valid until release. */
  const int64_t* received_splits;
  size_t num_received_splits;
  /* out: join: the last rank to join; else -1. */
  int32_t last_joined_rank;
} hvd_result;
#define HVD_RESULT_STRUCT_SIZE HVD_STRUCT_SIZE(hvd_result, last_joined_rank)
#define HVD_RESULT_INIT HVD_STRUCT_INIT(hvd_result, HVD_RESULT_STRUCT_SIZE)

/* The handle must have completed successfully. */
HVD_EXPORT hvd_error* hvd_handle_get_result(hvd_handle* handle, hvd_result* result /* in/out */);
/* Releases the caller's reference. An operation still in flight keeps
 * running; its borrowed tensors must stay alive until it completes. */
HVD_EXPORT void hvd_handle_release(hvd_handle* handle);

/* ------------------------------------------------------------------------ */
/* Timeline                                                                 */
/* ------------------------------------------------------------------------ */

/* Starts writing a Chrome-trace timeline (rank 0 writes; other ranks
 * accept and ignore the call). Replaces a running timeline. */
HVD_EXPORT hvd_error* hvd_start_timeline(const char* path, size_t path_len,
                                         int32_t mark_cycles);
HVD_EXPORT hvd_error* hvd_stop_timeline(void);

/* HOROVOD_AUTOTUNE and a binding's gradient buckets (ABI 1.9). An optimizer
 * that reduces its gradients in buckets of `configured_bytes` (`total_bytes`
 * of gradients a step) calls this between steps. `*state` is 0 when the job
 * does not autotune (the same on every rank: HOROVOD_AUTOTUNE must agree);
 * otherwise `*bytes` is the bucket size to use from the next step on and
 * `*state` is 1 while the tuner may still change it, 2 once it is done.
 * Only global rank 0 tunes; other ranks get (configured_bytes, 1), so the
 * caller must take rank 0's answer (horovod.common shares it) for every
 * rank to bucket alike. */
HVD_EXPORT hvd_error* hvd_autotune_gradient_bucket(int64_t configured_bytes, int64_t total_bytes,
                                                   int64_t* bytes /* out */, int32_t* state /* out */);

#ifdef __cplusplus
}
#endif

#endif /* HVD_C_API_H_ */
