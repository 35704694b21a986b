/*
 * c_allreduce_latency.c - how long a small synchronous allreduce takes when
 * the caller is C: the engine's own floor, without Python or ctypes. Every
 * rank sums one named float32 tensor in place with hvd_enqueue_wait() in a
 * loop; rank 0 prints the best of five loops, in microseconds per call.
 * Compare with tools/allreduce_benchmark.py (the same call from Python) and
 * Open MPI measured minutes apart.
 *
 *   cc -O2 -I packages/hvd-core/include tools/c_allreduce_latency.c -o /tmp/c_allreduce_latency \
 *      -L build/rel -lhvd_core -Wl,-rpath,$PWD/build/rel
 *   python -m horovod.runner -np 2 /tmp/c_allreduce_latency 4096 [calls per loop]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hvd/c_api.h"

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int failed(const char* what, hvd_error* error) {
  size_t length = 0;
  const char* message;
  if (error == NULL) return 0;
  message = hvd_error_get_message(error, &length);
  fprintf(stderr, "%s: %.*s\n", what, (int)length, message);
  hvd_error_destroy(error);
  return 1;
}

int main(int argc, char** argv) {
  const long bytes = argc > 1 ? atol(argv[1]) : 4;
  const long calls = argc > 2 ? atol(argv[2]) : 200000;
  const int64_t count = bytes >= 4 ? bytes / 4 : 1;
  int64_t shape[1];
  float* values = calloc((size_t)count, sizeof(float));
  hvd_topology topology = HVD_TOPOLOGY_INIT;
  DLTensor tensor;
  hvd_tensor_args tensor_args = HVD_TENSOR_ARGS_INIT;
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  double best = 1e30;
  int loop;
  long i;

  shape[0] = count;
  memset(&tensor, 0, sizeof(tensor));
  tensor.data = values;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 1;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  tensor_args.input = &tensor;
  tensor_args.output = &tensor;
  tensor_args.name = "latency";
  tensor_args.name_len = strlen("latency");
  args.collective = HVD_ALLREDUCE;
  args.reduce_op = HVD_OP_SUM;
  args.tensors = &tensor_args;
  args.num_tensors = 1;
  args.flags |= HVD_ENQUEUE_CALLER_WAITS;  /* the waiting caller drives the engine */

  if (values == NULL || failed("hvd_init", hvd_init(NULL))) return 1;
  if (failed("hvd_get_topology", hvd_get_topology(&topology))) return 1;
  for (loop = 0; loop < 5; ++loop) {
    const double start = seconds_now();
    for (i = 0; i < calls; ++i) {
      hvd_handle* handle = NULL;
      if (failed("hvd_enqueue_wait", hvd_enqueue_wait(&args, 1.0, &handle))) return 1;
      if (handle != NULL) { /* still in flight after a second: wait on */
        if (failed("hvd_handle_wait", hvd_handle_wait(handle, -1.0))) return 1;
        hvd_handle_release(handle);
      }
    }
    const double per_call = (seconds_now() - start) / (double)calls * 1e6;
    if (per_call < best) best = per_call;
  }
  if (topology.rank == 0) printf("%ld B allreduce from C, P=%d: %.2f us per call (best of 5 loops)\n", bytes,
                                 (int)topology.size, best);
  free(values);
  return failed("hvd_shutdown", hvd_shutdown());
}
