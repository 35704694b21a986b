/* gpu_plugin.h - the contract between libhvd_core.so and its CUDA plugin,
 * libhvd_core_cuda.so: one table of plain C functions.
 *
 * The plugin is the only code that touches CUDA or NCCL. libhvd_core.so
 * dlopen()s it the first time a CUDA tensor arrives, so a CPU-only install
 * (no plugin, no driver, no NCCL) never loads either. Plain C on purpose:
 * the two libraries each link their own copy of the C++ runtime, so no C++
 * object, exception or allocation crosses between them. Both are built from
 * one source tree and ship together; the core refuses a plugin whose
 * abi_version differs from HVD_GPU_PLUGIN_ABI.
 *
 * Conventions: every call that can fail takes an hvd_gpu_status (out) and
 * reports failure by its return value (-1 or NULL), with status.code an
 * hvd_error_code and status.message saying what failed. `dtype` values are
 * hvd::DataType's, `op` values hvd::ReduceOp's (src/common/dtype.h). A
 * stream object is one device plus one CUDA stream of hvd's own; everything
 * queued on it runs in order, and calls on it set the calling thread's
 * current device themselves (the engine runs on whichever thread drives it).
 */
#ifndef HVD_GPU_PLUGIN_H_
#define HVD_GPU_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_GPU_PLUGIN_ABI 1
#define HVD_GPU_PLUGIN_ENTRY "hvd_gpu_plugin_get"
#define HVD_GPU_NCCL_ID_BYTES 128

typedef struct hvd_gpu_status {
  int32_t code; /* 0: success, else an hvd_error_code */
  char message[1024];
} hvd_gpu_status;

/* One element of a batched copy: `count` elements from src to dst. */
typedef struct hvd_gpu_copy {
  void* dst;
  const void* src;
  size_t count;
} hvd_gpu_copy;

typedef enum hvd_gpu_copy_kind {
  HVD_GPU_DEVICE_TO_DEVICE = 0,
  HVD_GPU_DEVICE_TO_HOST = 1,
  HVD_GPU_HOST_TO_DEVICE = 2,
} hvd_gpu_copy_kind;

typedef struct hvd_gpu_stream hvd_gpu_stream; /* opaque */
typedef struct hvd_gpu_event hvd_gpu_event;   /* opaque */
typedef struct hvd_gpu_comm hvd_gpu_comm;     /* opaque: one NCCL communicator */

typedef struct hvd_gpu_plugin {
  size_t struct_size;
  uint32_t abi_version;

  /* Devices. "CUDA runtime 13.0, driver 13.0, 1 device(s)"; -1 and status when
   * no usable driver or device exists. */
  int32_t (*describe)(char* out, size_t capacity, hvd_gpu_status* status);
  /* The PCI bus id of `device` ("0000:3b:00.0"), which tells ranks sharing a GPU. */
  int32_t (*device_bus_id)(int32_t device, char* out, size_t capacity, hvd_gpu_status* status);

  /* An event recorded now on `framework_stream` (a cudaStream_t of the
   * caller's framework; NULL: the legacy default stream) of `device`: the
   * inputs are ready once it completes. */
  hvd_gpu_event* (*event_record)(int32_t device, void* framework_stream, hvd_gpu_status* status);
  /* 1: completed, 0: pending, -1: the device reported an error. */
  int32_t (*event_query)(hvd_gpu_event* event, hvd_gpu_status* status);
  void (*event_destroy)(hvd_gpu_event* event);

  hvd_gpu_stream* (*stream_create)(int32_t device, hvd_gpu_status* status);
  /* Waits for the stream's work, then frees it. */
  void (*stream_destroy)(hvd_gpu_stream* stream);
  /* Later work on `stream` waits for `event` (without blocking the host). */
  int32_t (*stream_wait_event)(hvd_gpu_stream* stream, hvd_gpu_event* event, hvd_gpu_status* status);
  /* An event that completes once everything queued on `stream` so far has. */
  hvd_gpu_event* (*stream_mark)(hvd_gpu_stream* stream, hvd_gpu_status* status);
  int32_t (*stream_synchronize)(hvd_gpu_stream* stream, hvd_gpu_status* status);

  /* Queued on the stream. Host memory in HOST_TO_DEVICE / DEVICE_TO_HOST
   * copies must stay valid until the stream reaches the copy. */
  int32_t (*copy)(hvd_gpu_stream* stream, void* dst, const void* src, size_t bytes, int32_t kind,
                  hvd_gpu_status* status);
  int32_t (*zero)(hvd_gpu_stream* stream, void* dst, size_t bytes, hvd_gpu_status* status);
  /* dst = src * factor for each entry, all in one kernel launch (factor 1:
   * a plain copy). Rounding as hvd-core's CPU scaling - bfloat16 in float32
   * rounded to nearest even, integers in double truncated toward zero -
   * except float16, whose factor is rounded to float16 first, as Horovod's
   * GPU kernels do. An entry may have dst == src. */
  int32_t (*copy_scaled)(hvd_gpu_stream* stream, const hvd_gpu_copy* copies, size_t num_copies, int32_t dtype,
                         double factor, hvd_gpu_status* status);

  /* Device memory of `device`; freeing waits for the device to finish with it. */
  void* (*device_alloc)(int32_t device, size_t bytes, hvd_gpu_status* status);
  void (*device_free)(int32_t device, void* ptr);
  /* Page-locked host memory, for staging. */
  void* (*host_alloc)(size_t bytes, hvd_gpu_status* status);
  void (*host_free)(void* ptr);

  /* NCCL, loaded at run time from `path` (NULL: the default search).
   * Returns NCCL's version code (e.g. 23203), -1 when it cannot be loaded. */
  int32_t (*nccl_open)(const char* path, hvd_gpu_status* status);
  /* Whether NCCL reduces `dtype` with `op` (1) or not (0). */
  int32_t (*nccl_supports)(int32_t dtype, int32_t op);
  int32_t (*nccl_unique_id)(void* id /* HVD_GPU_NCCL_ID_BYTES */, hvd_gpu_status* status);
  /* Collective over the `nranks` callers with the same id. */
  hvd_gpu_comm* (*nccl_comm_create)(int32_t device, int32_t nranks, int32_t rank, const void* id,
                                    hvd_gpu_status* status);
  /* Ends the communicator's pending work (peers failed) and frees it. */
  void (*nccl_comm_abort)(hvd_gpu_comm* comm);
  void (*nccl_comm_destroy)(hvd_gpu_comm* comm);
  /* -1 when NCCL reported an asynchronous error on the communicator. */
  int32_t (*nccl_comm_check)(hvd_gpu_comm* comm, hvd_gpu_status* status);
  /* The collectives, queued on `stream` (Communicator's contract, on device memory). */
  int32_t (*nccl_allreduce)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out, size_t count,
                            int32_t dtype, int32_t op, hvd_gpu_status* status);
  int32_t (*nccl_broadcast)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, void* data, size_t bytes, int32_t root,
                            hvd_gpu_status* status);
  int32_t (*nccl_allgatherv)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out,
                             const size_t* bytes_per_rank, hvd_gpu_status* status);
  int32_t (*nccl_alltoallv)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, const size_t* send_bytes,
                            void* out, const size_t* recv_bytes, hvd_gpu_status* status);
  int32_t (*nccl_reducescatterv)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out,
                                 const size_t* counts, int32_t dtype, int32_t op, hvd_gpu_status* status);
  /* The reduction of every member's `in` into `out` on member `root`. */
  int32_t (*nccl_reduce)(hvd_gpu_comm* comm, hvd_gpu_stream* stream, const void* in, void* out, size_t count,
                         int32_t dtype, int32_t op, int32_t root, hvd_gpu_status* status);
} hvd_gpu_plugin;

typedef const hvd_gpu_plugin* (*hvd_gpu_plugin_get_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_GPU_PLUGIN_H_ */
