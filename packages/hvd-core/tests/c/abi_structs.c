/* abi_structs.c - the C ABI's struct_size promise, seen from a caller:
 * a struct of exactly the 1.0 size works, a smaller one is refused naming
 * the struct, and a caller built against a later minor (a larger struct,
 * with fields this library does not know) gets nothing written past the
 * fields the library knows. One process, no launcher. Run by
 * tests/python/test_packaging.py. */
#include <hvd/c_api.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

int main(void) {
  hvd_init_args init;
  memset(&init, 0, sizeof(init));
  init.struct_size = HVD_INIT_ARGS_STRUCT_SIZE;
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
  info.struct_size = offsetof(hvd_process_set_info, ranks_capacity);
  err = hvd_get_process_set_info(&info);
  expect(err != NULL && strstr(message(err), "hvd_process_set_info") != NULL,
         "a too small hvd_process_set_info is refused, naming it");
  if (err != NULL) hvd_error_destroy(err);

  err = hvd_shutdown();
  if (err != NULL) hvd_error_destroy(err);
  if (failures == 0) printf("abi structs ok\n");
  return failures == 0 ? 0 : 1;
}
