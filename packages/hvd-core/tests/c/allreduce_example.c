/*
 * allreduce_example.c - the smallest complete user of hvd's C ABI: join the
 * job described by the environment, sum a float32 tensor over all ranks,
 * check the result, shut down. Run alone it is rank 0 of 1; under a launcher
 * (HOROVOD_RANK, HOROVOD_SIZE, ... HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT,
 * HOROVOD_SECRET_KEY) every rank prints the same summed tensor.
 * Exit status 0 only when the result is right.
 */
#include <stdio.h>
#include <string.h>

#include "hvd/c_api.h"

#define NUM_ELEMENTS 4

/* Prints and destroys `error`; returns 1 when there was one. */
static int report(const char* what, hvd_error* error) {
  size_t length = 0;
  const char* message;
  if (error == NULL) return 0;
  message = hvd_error_get_message(error, &length);
  fprintf(stderr, "%s failed (code %d): %.*s\n", what, (int)hvd_error_get_code(error),
          (int)length, message);
  hvd_error_destroy(error);
  return 1;
}

int main(void) {
  int32_t major = 0, minor = 0;
  hvd_topology topology = HVD_TOPOLOGY_INIT; /* struct_size set, the rest zero */
  float values[NUM_ELEMENTS];
  int64_t shape[1] = {NUM_ELEMENTS};
  DLTensor tensor;
  hvd_tensor_args tensor_args = HVD_TENSOR_ARGS_INIT;
  hvd_enqueue_args enqueue_args = HVD_ENQUEUE_ARGS_INIT;
  hvd_handle* handle = NULL;
  const char* name = "allreduce.example";
  int i, failed = 0;

  /* The library must speak our major version; a newer minor is fine. */
  hvd_get_api_version(&major, &minor);
  if (major != HVD_API_MAJOR) {
    fprintf(stderr, "libhvd_core API %d.%d, this program was built for %d.%d\n", (int)major,
            (int)minor, HVD_API_MAJOR, HVD_API_MINOR);
    return 1;
  }

  if (report("hvd_init", hvd_init(NULL))) return 1;

  if (report("hvd_get_topology", hvd_get_topology(&topology))) return 1;

  /* Rank r contributes (r + 1) * (i + 1), so the sum over ranks is
   * size * (size + 1) / 2 * (i + 1): every rank's share is visible. */
  for (i = 0; i < NUM_ELEMENTS; ++i) values[i] = (float)((topology.rank + 1) * (i + 1));

  memset(&tensor, 0, sizeof(tensor));
  tensor.data = values;
  tensor.device.device_type = kDLCPU;
  tensor.device.device_id = 0;
  tensor.ndim = 1;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  tensor.strides = NULL;
  tensor.byte_offset = 0;

  tensor_args.input = &tensor;
  tensor_args.output = &tensor; /* in place */
  tensor_args.name = name;
  tensor_args.name_len = strlen(name);

  enqueue_args.collective = HVD_ALLREDUCE;
  enqueue_args.process_set_id = 0;
  enqueue_args.reduce_op = HVD_OP_SUM;
  enqueue_args.tensors = &tensor_args;
  enqueue_args.num_tensors = 1;

  if (report("hvd_enqueue", hvd_enqueue(&enqueue_args, &handle))) {
    hvd_shutdown();
    return 1;
  }
  failed = report("hvd_handle_wait", hvd_handle_wait(handle, 60.0));
  hvd_handle_release(handle);

  if (!failed) {
    float expected_factor = (float)topology.size * (float)(topology.size + 1) / 2.0f;
    printf("rank %d of %d: allreduce result", (int)topology.rank, (int)topology.size);
    for (i = 0; i < NUM_ELEMENTS; ++i) {
      printf(" %g", (double)values[i]);
      if (values[i] != expected_factor * (float)(i + 1)) failed = 1;
    }
    printf("%s\n", failed ? " WRONG" : " ok");
  }

  /* The same sum again through hvd_enqueue_wait (ABI 1.7), enqueue and wait
   * in one call: a NULL handle back means done and released already. */
  if (!failed && minor >= 7) {
    for (i = 0; i < NUM_ELEMENTS; ++i) values[i] = (float)((topology.rank + 1) * (i + 1));
    name = "allreduce.example.enqueue_wait";
    tensor_args.name = name;
    tensor_args.name_len = strlen(name);
    enqueue_args.flags |= HVD_ENQUEUE_CALLER_WAITS;
    handle = NULL;
    failed = report("hvd_enqueue_wait", hvd_enqueue_wait(&enqueue_args, 60.0, &handle));
    if (handle != NULL) { /* still in flight after 60 s: wait on as usual */
      failed = report("hvd_handle_wait", hvd_handle_wait(handle, 60.0)) || failed;
      hvd_handle_release(handle);
    }
    if (!failed) {
      float expected_factor = (float)topology.size * (float)(topology.size + 1) / 2.0f;
      for (i = 0; i < NUM_ELEMENTS; ++i) {
        if (values[i] != expected_factor * (float)(i + 1)) failed = 1;
      }
      printf("rank %d of %d: hvd_enqueue_wait result%s\n", (int)topology.rank, (int)topology.size,
             failed ? " WRONG" : " ok");
    }
  }

  if (report("hvd_shutdown", hvd_shutdown())) failed = 1;
  return failed ? 1 : 0;
}
