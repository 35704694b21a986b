// inert_knobs.cc - see inert_knobs.h. Knobs hvd honours are read where they
// act (engine.cc, logging.cc, the bindings); docs/core.md lists both kinds.
#include "engine/inert_knobs.h"

#include <strings.h>

#include "common/env.h"

namespace hvd {
namespace {

constexpr const char* kOneStream = "hvd queues each process set's GPU work on one CUDA stream";

struct InertKnob {
  const char* name;
  const char* reason;
};

constexpr InertKnob kInertKnobs[] = {
    {"HOROVOD_TORUS_ALLREDUCE", "NCCL picks its own ring and tree algorithms across hosts"},
    {"HOROVOD_NUM_NCCL_STREAMS", kOneStream},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", "hvd always batches the copies of a fused response into few kernel launches"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", "hvd always completes GPU collectives asynchronously (CUDA events)"},
    {"HOROVOD_DISABLE_NVTX_RANGES", "hvd emits no NVTX ranges"},
    {"HOROVOD_CCL_CACHE", "hvd has no oneCCL backend"},
    {"HOROVOD_CCL_BGT_AFFINITY", "hvd has no oneCCL backend"},
    {"HOROVOD_MPI_THREADS_DISABLE",
     "hvd's MPI data plane (HOROVOD_CPU_OPERATIONS=mpi) needs MPI_THREAD_MULTIPLE"},
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "hvd's Adasum runs over its own transports, not in MPI chunks"},
    {"HOROVOD_DISABLE_GROUP_FUSION", "hvd always fuses grouped tensors with other ready tensors"},
};

bool is_false(const std::string& value) {
  return value.empty() || value == "0" || strcasecmp(value.c_str(), "false") == 0 ||
         strcasecmp(value.c_str(), "no") == 0 || strcasecmp(value.c_str(), "off") == 0;
}

}  // namespace

std::vector<std::string> inert_knob_notices() {
  std::vector<std::string> notices;
  for (const auto& knob : kInertKnobs) {
    std::string value = env_string(knob.name, "");
    if (is_false(value)) continue;
    notices.push_back(std::string(knob.name) + "=" + value + " has no effect: " + knob.reason);
  }
  // The controller: hvd always negotiates over its own TCP controller (which
  // stands in for Gloo's); MPI can carry the data instead.
  std::string controller = env_string("HOROVOD_CONTROLLER", "");
  if (strcasecmp(controller.c_str(), "mpi") == 0) {
    notices.push_back("HOROVOD_CONTROLLER=" + controller +
                      " has no effect: hvd negotiates over its own controller; HOROVOD_CPU_OPERATIONS=mpi moves "
                      "the data through MPI");
  }
  return notices;
}

}  // namespace hvd
