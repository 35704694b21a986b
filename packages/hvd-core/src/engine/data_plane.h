// data_plane.h - where a response's tensors live and how they move: host
// memory with the process set's CPU communicator (HostDataPlane, below), or
// a GPU with NCCL (gpu/gpu_data_plane.h). The executor's algorithms -
// fusion, scaling, zeros for a joined rank, results the core allocates - are
// written once against this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "engine/fusion_buffer.h"
#include "gpu/gpu_plugin.h"
#include "hvd/dlpack.h"

struct hvd_handle;

namespace hvd {

class Communicator;

// This rank's tensor for one name of a response; handle == nullptr when the
// rank has joined and takes part in an allreduce with zeros.
struct LocalTensor {
  hvd_handle* handle = nullptr;
  size_t index = 0;
};

// The outcome of one tensor of a response (no error: success).
struct Completion {
  LocalTensor local;
  std::optional<Error> error;
};

// `count` elements from src to dst (both in the plane's memory): the GPU
// plugin's own entry type, so a GPU plane hands the list over as it is.
using CopySpec = hvd_gpu_copy;

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // The communicator that moves data of `dtype`, reduced or only moved (on
  // a GPU, NCCL cannot reduce every dtype: those go through host memory).
  virtual Communicator& comm(DataType dtype, bool reduces) = 0;
  // All below may be queued (GPU): they take effect in order, before the
  // communicator's later calls and before complete() reports anything.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  // dst = src * factor for each of the n entries (factor 1: copy); dst may equal src.
  virtual void copy_scaled(const CopySpec* copies, size_t n, DataType dtype, double factor) = 0;
  // Reused buffers of the plane's memory: the fusion buffer, and scratch for
  // results nobody keeps (a joined rank's, a failed allocation's).
  virtual void* fusion_buffer(size_t bytes) = 0;
  virtual void* scratch(size_t bytes) = 0;
  // A result the core owns, handed to the caller as a DLManagedTensor.
  virtual DLManagedTensor* make_owned(const std::vector<int64_t>& shape, DataType dtype) = 0;
  // Fused tensors start at multiples of this many bytes.
  virtual size_t fusion_alignment() const = 0;
  // A fused allreduce of `bytes` through `comm` is run in pieces of this
  // many bytes (Communicator::fused_piece_bytes); 0: packed, at once.
  virtual size_t fused_piece_bytes(const Communicator& comm, size_t bytes) const {
    (void)comm;
    (void)bytes;
    return 0;
  }
  // For algorithms that run on the CPU (Adasum): host memory holding the
  // `bytes` at `data` (data itself on the host), and the way back.
  virtual void* host_view(void* data, size_t bytes) = 0;
  virtual void write_back(void* data, const void* host, size_t bytes) = 0;
  // Tensor `local` is done (error == nullptr) or failed, once the work
  // queued so far has finished. Only recorded here: the process set
  // completes the handles after the whole response ran (a response that
  // fails half-way fails all its tensors, each once). A joined rank's
  // LocalTensor (no handle) is ignored.
  void complete(const LocalTensor& local, const Error* error) {
    if (local.handle == nullptr) return;
    completions_.push_back(Completion{local, error ? std::optional<Error>(*error) : std::nullopt});
  }
  // What complete() recorded since the last clear (kept, with its capacity,
  // so the steady state allocates nothing).
  std::vector<Completion>& completions() { return completions_; }
  void discard_completions() { completions_.clear(); }

 protected:
  std::vector<Completion> completions_;
};

// Host memory and the process set's CPU communicator: everything happens at
// once, on the calling thread.
class HostDataPlane : public DataPlane {
 public:
  explicit HostDataPlane(Communicator& comm) : comm_(comm) {}
  Communicator& comm(DataType, bool) override { return comm_; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_scaled(const CopySpec* copies, size_t n, DataType dtype, double factor) override;
  void* fusion_buffer(size_t bytes) override { return fusion_.get(bytes); }
  void* scratch(size_t bytes) override;
  DLManagedTensor* make_owned(const std::vector<int64_t>& shape, DataType dtype) override;
  size_t fusion_alignment() const override { return 1; }
  size_t fused_piece_bytes(const Communicator& comm, size_t bytes) const override;
  void* host_view(void* data, size_t) override { return data; }
  void write_back(void*, const void*, size_t) override {}

 private:
  Communicator& comm_;
  FusionBuffer fusion_;
  std::vector<unsigned char> scratch_;
};

}  // namespace hvd
