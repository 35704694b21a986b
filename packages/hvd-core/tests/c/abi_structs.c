/* abi_structs.c - the C ABI's struct_size promise, seen from a caller:
 * a struct of exactly the 1.0 size works, a smaller one is refused naming
 * the struct, and a caller built against a later minor (a larger struct,
 * with fields this library does not know) gets nothing written past the
 * fields the library knows, and has its arrays of hvd_tensor_args read at
 * its own element size. Also the HVD_*_INIT initializers and the DLPack
 * header's own definitions. One process, no launcher. Run by
 * tests/python/test_packaging.py. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS */
#include <hvd/c_api.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures = 0;

static const char* message(const hvd_error* err) {
  size_t length;
  return err != NULL ? hvd_error_get_message(err, &length) : "";
}

static void expect(int ok, const char* what) {
  if (!ok) {
    printf("FAILED: %s\n", what);
    ++failures;
  }
}

/* A caller from a future minor: hvd_topology plus fields the library lacks. */
typedef struct {
  hvd_topology known;
  unsigned char future[32];
} newer_topology;

/* The same for hvd_tensor_args, whose callers pass arrays of them. */
typedef struct {
  hvd_tensor_args known;
  int64_t future;
} newer_tensor_args;

/* A grouped allreduce (Sum) of two float tensors, described with
 * `newer_tensor_args` entries; returns 1 when both results are right. */
static int grouped_sum_with_newer_entries(void) {
  float a[2] = {1.0f, 2.0f}, b[3] = {3.0f, 4.0f, 5.0f}, a_out[2] = {0}, b_out[3] = {0};
  int64_t a_shape[1] = {2}, b_shape[1] = {3};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  DLTensor ta = {a, cpu, 1, f32, a_shape, NULL, 0}, tb = {b, cpu, 1, f32, b_shape, NULL, 0};
  DLTensor oa = {a_out, cpu, 1, f32, a_shape, NULL, 0}, ob = {b_out, cpu, 1, f32, b_shape, NULL, 0};
  newer_tensor_args entries[2];
  memset(entries, 0xEE, sizeof(entries)); /* garbage in the fields this library does not know */
  hvd_tensor_args first = HVD_TENSOR_ARGS_INIT, second = HVD_TENSOR_ARGS_INIT;
  first.input = &ta;
  first.output = &oa;
  first.name = "newer.a";
  first.name_len = 7;
  second.input = &tb;
  second.output = &ob;
  second.name = "newer.b";
  second.name_len = 7;
  entries[0].known = first;
  entries[1].known = second;
  entries[0].known.struct_size = entries[1].known.struct_size = sizeof(newer_tensor_args);
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  args.collective = HVD_ALLREDUCE;
  args.reduce_op = HVD_OP_SUM;
  args.tensors = &entries[0].known;
  args.num_tensors = 2;
  hvd_handle* handle = NULL;
  hvd_error* err = hvd_enqueue(&args, &handle);
  if (err == NULL) err = hvd_handle_wait(handle, -1);
  if (handle != NULL) hvd_handle_release(handle);
  if (err != NULL) {
    printf("grouped allreduce failed: %s\n", message(err));
    hvd_error_destroy(err);
    return 0;
  }
  return a_out[0] == 1.0f && a_out[1] == 2.0f && b_out[0] == 3.0f && b_out[2] == 5.0f;
}

/* Entries of one array that disagree on struct_size are refused. */
static int unequal_entries_are_refused(void) {
  float x[1] = {1.0f};
  int64_t shape[1] = {1};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  DLTensor t = {x, cpu, 1, f32, shape, NULL, 0};
  hvd_tensor_args entries[2] = {HVD_TENSOR_ARGS_INIT, HVD_TENSOR_ARGS_INIT};
  entries[0].input = entries[1].input = &t;
  entries[1].struct_size = HVD_TENSOR_ARGS_STRUCT_SIZE + 8;
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  args.collective = HVD_ALLREDUCE;
  args.reduce_op = HVD_OP_SUM;
  args.tensors = entries;
  args.num_tensors = 2;
  hvd_handle* handle = NULL;
  hvd_error* err = hvd_enqueue(&args, &handle);
  int refused = err != NULL && hvd_error_get_code(err) == HVD_ERROR_INVALID_ARGUMENT &&
                strstr(message(err), "tensors[1] has struct_size") != NULL && handle == NULL;
  if (err != NULL) hvd_error_destroy(err);
  if (handle != NULL) hvd_handle_release(handle);
  return refused;
}

/* `size` zeroed bytes that end where an inaccessible page begins: a library
 * that reads a struct past its struct_size crashes here at once. */
static void* guarded(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* base = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED || mprotect(base + page, page, PROT_NONE) != 0) return NULL;
  memset(base + page - size, 0, size);
  return base + page - size;
}

/* Found by tests/fuzz/fuzz_c_api: hvd_enqueue read process_set_id before
 * checking struct_size, and the scale-factor code read `flags` (since 1.1)
 * whatever struct_size said. Both read past a smaller caller's struct. */
static int enqueue_reads_nothing_past_struct_size(void) {
  int ok = 1;
  hvd_handle* handle = NULL;
  hvd_enqueue_args* tiny = guarded(sizeof(size_t));
  tiny->struct_size = sizeof(size_t);
  hvd_error* err = hvd_enqueue(tiny, &handle);
  ok = ok && err != NULL && hvd_error_get_code(err) == HVD_ERROR_INVALID_ARGUMENT &&
       strstr(message(err), "hvd_enqueue_args") != NULL && handle == NULL;
  if (err != NULL) hvd_error_destroy(err);

  /* ABI 1.0's hvd_enqueue_args ended with on_done_ctx. */
  const size_t size_1_0 = offsetof(hvd_enqueue_args, on_done_ctx) + sizeof(void*);
  float value = 3.0f, out = 0.0f;
  int64_t shape[1] = {1};
  DLTensor input = {&value, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor output = {&out, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  hvd_tensor_args tensor = HVD_TENSOR_ARGS_INIT;
  tensor.input = &input;
  tensor.output = &output;
  tensor.name = "abi10.sum";
  tensor.name_len = 9;
  hvd_enqueue_args* old = guarded(size_1_0);
  old->struct_size = size_1_0;
  old->collective = HVD_ALLREDUCE;
  old->reduce_op = HVD_OP_SUM;
  old->tensors = &tensor;
  old->num_tensors = 1;
  err = hvd_enqueue(old, &handle);
  if (err == NULL) err = hvd_handle_wait(handle, 60.0);
  ok = ok && err == NULL && out == 3.0f;
  if (err != NULL) {
    printf("ABI 1.0 enqueue: %s\n", message(err));
    hvd_error_destroy(err);
  }
  if (handle != NULL) hvd_handle_release(handle);
  return ok;
}

/* Found by tests/fuzz/fuzz_c_api: the element count was multiplied without
 * an overflow check, so shape {2^49, 2^49} counted 0 elements and passed
 * without a data pointer; and the engine multiplies the dimensions of an
 * empty tensor too, so {2^49, 2^49, 0} overflowed there. */
static int shape_past_64_bits_is_refused(int64_t last_dim) {
  int64_t shape[3] = {(int64_t)1 << 49, (int64_t)1 << 49, last_dim};
  DLTensor input = {NULL, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, NULL, 0};
  hvd_tensor_args tensor = HVD_TENSOR_ARGS_INIT;
  tensor.input = &input;
  hvd_enqueue_args args = HVD_ENQUEUE_ARGS_INIT;
  args.collective = HVD_ALLREDUCE;
  args.reduce_op = HVD_OP_SUM;
  args.tensors = &tensor;
  args.num_tensors = 1;
  hvd_handle* handle = NULL;
  hvd_error* err = hvd_enqueue(&args, &handle);
  int refused = err != NULL && hvd_error_get_code(err) == HVD_ERROR_INVALID_ARGUMENT &&
                strstr(message(err), "64-bit") != NULL && handle == NULL;
  if (err != NULL) hvd_error_destroy(err);
  if (handle != NULL) {
    hvd_handle_wait(handle, 10.0);
    hvd_handle_release(handle);
  }
  return refused;
}

int main(void) {
  hvd_init_args init = HVD_INIT_ARGS_INIT;
  expect(init.struct_size == HVD_INIT_ARGS_STRUCT_SIZE && init.num_process_sets == 0 &&
             init.process_set_ranks == NULL,
         "HVD_INIT_ARGS_INIT sets struct_size and zeroes the rest");
  hvd_error* err = hvd_init(&init);
  if (err != NULL) {
    printf("hvd_init failed: %s\n", message(err));
    return 1;
  }

  hvd_topology topology;
  memset(&topology, 0xAB, sizeof(topology));
  topology.struct_size = HVD_TOPOLOGY_STRUCT_SIZE;
  err = hvd_get_topology(&topology);
  expect(err == NULL && topology.rank == 0 && topology.size == 1 && topology.is_homogeneous == 1,
         "hvd_get_topology with the header's struct size");

  topology.struct_size = offsetof(hvd_topology, is_homogeneous);
  err = hvd_get_topology(&topology);
  expect(err != NULL && hvd_error_get_code(err) == HVD_ERROR_INVALID_ARGUMENT &&
             strstr(message(err), "hvd_topology") != NULL,
         "a struct smaller than ABI 1.0's is refused, naming it");
  if (err != NULL) hvd_error_destroy(err);

  newer_topology newer;
  memset(&newer, 0xCD, sizeof(newer));
  newer.known.struct_size = sizeof(newer);
  err = hvd_get_topology(&newer.known);
  expect(err == NULL && newer.known.size == 1, "a larger struct from a later minor is accepted");
  int untouched = 1;
  for (size_t i = 0; i < sizeof(newer.future); ++i) untouched = untouched && newer.future[i] == 0xCD;
  expect(untouched, "nothing is written past the fields the library knows");

  hvd_process_set_info info;
  int32_t ranks[4] = {-1, -1, -1, -1};
  memset(&info, 0, sizeof(info));
  info.struct_size = HVD_PROCESS_SET_INFO_STRUCT_SIZE;
  info.process_set_id = 0;
  info.ranks = ranks;
  info.ranks_capacity = 4;
  err = hvd_get_process_set_info(&info);
  expect(err == NULL && info.size == 1 && info.rank == 0 && ranks[0] == 0 && ranks[1] == -1,
         "hvd_get_process_set_info with the header's struct size");
  expect(err == NULL && info.fast_lane_calls == 0, "a single process runs nothing in the fast lane");
  expect(err == NULL && info.request_batches == 0, "a single process that submitted nothing sent no requests");
  info.struct_size = offsetof(hvd_process_set_info, request_batches);  /* a 1.9 caller */
  info.request_batches = 0xCDCDCDCDCDCDCDCDull;
  err = hvd_get_process_set_info(&info);
  expect(err == NULL && info.size == 1 && info.request_batches == 0xCDCDCDCDCDCDCDCDull,
         "a 1.9 hvd_process_set_info is accepted and nothing past it is written");
  info.struct_size = offsetof(hvd_process_set_info, fast_lane_calls);  /* a 1.7 caller */
  info.fast_lane_calls = 0xCDCDCDCDCDCDCDCDull;
  err = hvd_get_process_set_info(&info);
  expect(err == NULL && info.size == 1 && info.fast_lane_calls == 0xCDCDCDCDCDCDCDCDull,
         "a 1.7 hvd_process_set_info is accepted and nothing past it is written");
  info.struct_size = offsetof(hvd_process_set_info, ranks_capacity);
  err = hvd_get_process_set_info(&info);
  expect(err != NULL && strstr(message(err), "hvd_process_set_info") != NULL,
         "a too small hvd_process_set_info is refused, naming it");
  if (err != NULL) hvd_error_destroy(err);

  expect(grouped_sum_with_newer_entries(), "an array of larger hvd_tensor_args is read at the caller's element size");
  expect(unequal_entries_are_refused(), "entries with different struct_size are refused, naming the entry");
  expect(enqueue_reads_nothing_past_struct_size(), "hvd_enqueue reads nothing past the caller's struct_size");
  expect(shape_past_64_bits_is_refused(1), "a shape whose byte size overflows 64 bits is refused");
  expect(shape_past_64_bits_is_refused(0), "an empty tensor whose other dimensions overflow 64 bits is refused");

  /* The DLPack header is DLPack's own: its version and newer types are there. */
  expect(DLPACK_MAJOR_VERSION >= 1 && sizeof(struct DLManagedTensorVersioned) > sizeof(DLTensor),
         "dlpack.h is DLPack's, with its version macros and DLManagedTensorVersioned");

  err = hvd_shutdown();
  if (err != NULL) hvd_error_destroy(err);
  if (failures == 0) printf("abi structs ok\n");
  return failures == 0 ? 0 : 1;
}
