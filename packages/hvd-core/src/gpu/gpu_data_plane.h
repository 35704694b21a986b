// gpu_data_plane.h - a process set's CUDA tensors on this rank: hvd's own
// stream on the rank's GPU, the set's NCCL communicator (or host staging),
// the device fusion buffer, and the completions waiting for the GPU.
//
// Nothing blocks the host: a response's inputs are awaited on the stream
// (the framework's ready events), its copies, kernels and NCCL calls are
// queued, and an event marks its end. The process set's engine polls those
// events between steps and completes the handles whose work has finished,
// so heartbeats, negotiation and failure detection go on meanwhile. When a
// peer fails, abort() ends NCCL's pending work (ncclCommAbort) and fails
// every waiting handle.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/data_plane.h"
#include "engine/message.h"
#include "gpu/gpu_plugin.h"

namespace hvd {

class Communicator;
class NcclCommunicator;
class HostStagedCommunicator;
class HierarchicalNcclCommunicator;
class PinnedHostBuffer;

// HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_<OP>: NCCL (the default) or the CPU
// transports (MPI, GLOO: staged through host memory), per collective.
struct GpuOptions {
  std::array<bool, 8> use_nccl{{true, true, true, true, true, true, true, true}};  // by Collective value
  std::string host_name;          // this rank's host, to tell ranks that share a GPU
  std::vector<int> global_ranks;  // member index -> global rank, for messages
  // HOROVOD_HIERARCHICAL_ALLREDUCE=1: allreduce through each host's first
  // member when the set spans several hosts (hosts: member -> host name).
  bool hierarchical_allreduce = false;
  std::vector<std::string> hosts;
  // A CPU communicator among some members (indices into the set), collective
  // over them; `purpose` keeps its keys apart from the set's own.
  std::function<std::unique_ptr<Communicator>(const std::vector<int>& members, const std::string& purpose)>
      make_host_comm;
};

class GpuDataPlane : public DataPlane {
 public:
  // Collective over the set's members, which all create it while running the
  // same response: `host` (the set's CPU communicator) carries their
  // agreement on NCCL and NCCL's unique id.
  GpuDataPlane(Communicator& host, int device, const GpuOptions& options);
  ~GpuDataPlane() override;

  // Around executing one response: begin() makes the stream wait for the
  // inputs' ready events, end() marks where the response's work ends and
  // takes its completions, which poll() reports once the GPU is past it.
  void begin(const Response& response, const std::vector<LocalTensor>& locals);
  void end();
  // Completes the handles whose work has finished. Throws Error(kInternal)
  // when the GPU or NCCL reported an error.
  void poll();
  bool pending() const { return !pending_.empty(); }
  bool uses_nccl() const { return nccl_comm_ != nullptr || local_comm_ != nullptr; }
  // A peer failed or the set stops: NCCL's work is aborted and every
  // handle still waiting fails with `error`.
  void abort(const Error& error);

  // DataPlane
  Communicator& comm(DataType dtype, bool reduces) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_scaled(const CopySpec* copies, size_t n, DataType dtype, double factor) override;
  void* fusion_buffer(size_t bytes) override;
  void* scratch(size_t bytes) override;
  DLManagedTensor* make_owned(const std::vector<int64_t>& shape, DataType dtype) override;
  size_t fusion_alignment() const override { return 256; }
  void* host_view(void* data, size_t bytes) override;
  void write_back(void* data, const void* host, size_t bytes) override;

 private:
  struct DeviceBuffer {
    void* data = nullptr;
    size_t capacity = 0;
  };
  struct Pending {
    hvd_gpu_event* done;
    std::vector<Completion> completions;
  };
  void setup_nccl(Communicator& host, const GpuOptions& options);
  void setup_hierarchy(Communicator& host, const GpuOptions& options);
  void* grow(DeviceBuffer& buffer, size_t bytes);
  void release(DeviceBuffer& buffer);
  void fail_pending(const Error& error);

  const hvd_gpu_plugin* api_;
  int device_;
  GpuOptions options_;
  hvd_gpu_stream* stream_ = nullptr;
  hvd_gpu_comm* nccl_comm_ = nullptr;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<HostStagedCommunicator> staged_;
  // Hierarchical allreduce: this host's NCCL communicator, and on the host's
  // first member the CPU communicator of the hosts' first members.
  hvd_gpu_comm* local_comm_ = nullptr;
  std::unique_ptr<Communicator> cross_host_;
  std::unique_ptr<HostStagedCommunicator> cross_staged_;
  std::unique_ptr<HierarchicalNcclCommunicator> hierarchical_;
  Collective collective_ = Collective::kAllreduce;  // of the response being run
  DeviceBuffer fusion_, scratch_;
  std::unique_ptr<PinnedHostBuffer> host_view_;  // Adasum's host copy
  std::deque<Pending> pending_;
};

}  // namespace hvd
