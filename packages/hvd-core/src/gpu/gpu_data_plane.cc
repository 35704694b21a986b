// gpu_data_plane.cc - see gpu_data_plane.h.
#include "gpu/gpu_data_plane.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/logging.h"
#include "engine/handle.h"
#include "gpu/gpu_communicators.h"
#include "gpu/gpu_plugin_loader.h"

namespace hvd {

GpuDataPlane::GpuDataPlane(Communicator& host, int device, const GpuOptions& options)
    : api_(gpu_support().plugin), device_(device), options_(options) {
  if (api_ == nullptr) throw_error(ErrorCode::kUnsupported, "CUDA tensors need the CUDA plugin: " + gpu_support().why);
  hvd_gpu_status status{};
  stream_ = api_->stream_create(device_, &status);
  if (stream_ == nullptr) throw_gpu_status(status, "creating hvd's CUDA stream on device " + std::to_string(device));
  staged_ = std::make_unique<HostStagedCommunicator>(api_, stream_, host);
  host_view_ = std::make_unique<PinnedHostBuffer>(api_, stream_);
  setup_nccl(host, options);
}

GpuDataPlane::~GpuDataPlane() {
  hierarchical_.reset();
  cross_staged_.reset();
  cross_host_.reset();
  if (local_comm_ != nullptr) api_->nccl_comm_destroy(local_comm_);
  if (nccl_comm_ != nullptr) api_->nccl_comm_destroy(nccl_comm_);
  nccl_.reset();
  staged_.reset();
  host_view_.reset();
  release(fusion_);
  release(scratch_);
  for (Pending& p : pending_) api_->event_destroy(p.done);
  api_->stream_destroy(stream_);  // waits for queued work first
}

// Every member learns whether all of them can run NCCL, each on a GPU of its
// own, and they use NCCL only if so (the decision must be the same
// everywhere). NCCL refuses two ranks on one GPU; NCCL_HOSTID, which NCCL
// uses to tell hosts apart, is honoured the same way here.
void GpuDataPlane::setup_nccl(Communicator& host, const GpuOptions& options) {
  const GpuSupport& gpu = gpu_support_with_nccl();
  const int size = host.size(), rank = host.rank();
  constexpr size_t kRecord = 256;  // [0]: can run NCCL; then "<host> GPU <pci bus id>"
  char bus[64] = {0};
  hvd_gpu_status status{};
  const bool wanted = std::find(options.use_nccl.begin(), options.use_nccl.end(), true) != options.use_nccl.end();
  bool ok = wanted && gpu.nccl_version > 0 && api_->device_bus_id(device_, bus, sizeof(bus), &status) == 0;
  const char* host_id = std::getenv("NCCL_HOSTID");
  std::string identity = std::string(host_id != nullptr && *host_id ? host_id : options.host_name) + " GPU " + bus;
  std::vector<char> mine(kRecord, 0), all(kRecord * static_cast<size_t>(size), 0);
  mine[0] = ok ? 1 : 0;
  std::memcpy(&mine[1], identity.data(), std::min(identity.size(), kRecord - 2));
  host.allgatherv(mine.data(), all.data(), std::vector<size_t>(static_cast<size_t>(size), kRecord));
  std::string why;
  std::map<std::string, int> first_member;
  for (int m = 0; m < size && why.empty(); ++m) {
    const char* record = &all[static_cast<size_t>(m) * kRecord];
    const std::string who = options.global_ranks.empty() ? "member " + std::to_string(m)
                                                         : "rank " + std::to_string(options.global_ranks[m]);
    if (record[0] == 0) {
      if (m != rank) why = who + " cannot use NCCL (its log says why)";
      else if (!wanted) why = "HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_<OP> choose MPI or GLOO for every collective";
      else why = who + " cannot use NCCL: " + (gpu.nccl_version > 0 ? std::string(status.message) : gpu.nccl_error);
      break;
    }
    std::string id(record + 1);
    auto [it, fresh] = first_member.emplace(id, m);
    if (!fresh) {
      const std::string other = options.global_ranks.empty() ? "member " + std::to_string(it->second)
                                                             : "rank " + std::to_string(options.global_ranks[it->second]);
      why = other + " and " + who + " share one GPU (" + id + "), and NCCL needs a GPU per rank";
    }
  }
  // Member 0 creates NCCL's unique id; a failure there sends a record whose
  // first byte is 0, and everyone stays on host staging.
  char id_record[1 + HVD_GPU_NCCL_ID_BYTES] = {0};
  if (why.empty()) {
    if (rank == 0 && api_->nccl_unique_id(id_record + 1, &status) == 0) id_record[0] = 1;
    host.broadcast(id_record, sizeof(id_record), 0);
    if (id_record[0] == 0) why = "NCCL could not create a unique id on the first rank of the set";
  }
  if (!why.empty()) {
    if (rank == 0 && wanted) {
      HVD_LOG(kWarning, "CUDA tensors of this process set move through host memory (slower than NCCL): " << why);
    }
    return;
  }
  nccl_comm_ = api_->nccl_comm_create(device_, size, rank, id_record + 1, &status);
  if (nccl_comm_ == nullptr) throw_gpu_status(status, "creating the NCCL communicator of the process set");
  nccl_ = std::make_unique<NcclCommunicator>(api_, nccl_comm_, stream_, rank, size);
  HVD_LOG(kDebug, "CUDA tensors of this process set on " << identity << ": NCCL " << gpu.nccl_version);
  if (options.hierarchical_allreduce) setup_hierarchy(host, options);
}

// Collective over the set, like setup_nccl; every member reaches the same
// decision from the same inputs (host names, the knob, the roots' outcome).
void GpuDataPlane::setup_hierarchy(Communicator& host, const GpuOptions& options) {
  const int size = host.size(), rank = host.rank();
  if (static_cast<int>(options.hosts.size()) != size || !options.make_host_comm) return;
  std::vector<int> local, roots;  // the members on this host; each host's first member
  std::map<std::string, int> seen;
  for (int m = 0; m < size; ++m) {
    if (seen.emplace(options.hosts[m], m).second) roots.push_back(m);
    if (options.hosts[m] == options.hosts[rank]) local.push_back(m);
  }
  if (roots.size() < 2) return;  // one host: flat NCCL already is the whole hierarchy
  const bool root = local[0] == rank;
  const int local_rank = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  // Each host's first member makes the NCCL id of its host; all take theirs.
  constexpr size_t kRecord = 1 + HVD_GPU_NCCL_ID_BYTES;
  std::vector<char> mine(kRecord, 0), all(kRecord * static_cast<size_t>(size), 0);
  hvd_gpu_status status{};
  if (root && api_->nccl_unique_id(&mine[1], &status) == 0) mine[0] = 1;
  host.allgatherv(mine.data(), all.data(), std::vector<size_t>(static_cast<size_t>(size), kRecord));
  for (int r : roots) {
    if (all[static_cast<size_t>(r) * kRecord] == 0) {
      if (rank == 0) HVD_LOG(kWarning, "HOROVOD_HIERARCHICAL_ALLREDUCE: a host could not create its NCCL id; "
                                       "allreduce of CUDA tensors stays flat NCCL");
      return;
    }
  }
  local_comm_ = api_->nccl_comm_create(device_, static_cast<int>(local.size()), local_rank,
                                       &all[static_cast<size_t>(local[0]) * kRecord + 1], &status);
  if (local_comm_ == nullptr) throw_gpu_status(status, "creating the NCCL communicator within the host");
  if (root) {
    cross_host_ = options.make_host_comm(roots, "gpu-cross-host");
    cross_staged_ = std::make_unique<HostStagedCommunicator>(api_, stream_, *cross_host_);
  }
  hierarchical_ = std::make_unique<HierarchicalNcclCommunicator>(api_, local_comm_, stream_, cross_staged_.get(),
                                                                 *nccl_);
  HVD_LOG(kDebug, "CUDA allreduce of this process set: hierarchical across " << roots.size() << " hosts");
}

Communicator& GpuDataPlane::comm(DataType dtype, bool reduces) {
  const size_t which = static_cast<size_t>(collective_);
  const bool wanted = which < options_.use_nccl.size() && options_.use_nccl[which];
  if (nccl_ && wanted && (!reduces || api_->nccl_supports(static_cast<int32_t>(dtype), 0) != 0)) {
    if (hierarchical_ && reduces && collective_ == Collective::kAllreduce) return *hierarchical_;
    return *nccl_;
  }
  return *staged_;
}

void GpuDataPlane::begin(const Response& response, const std::vector<LocalTensor>& locals) {
  collective_ = response.collective;
  const hvd_handle* last = nullptr;
  for (const LocalTensor& local : locals) {
    if (local.handle == nullptr || local.handle == last) continue;
    last = local.handle;
    const TensorSlot& slot = local.handle->tensors[local.index];
    if (slot.device_id != device_) {
      throw_error(ErrorCode::kInvalidArgument,
                  "tensor '" + slot.meta.name + "' is on CUDA device " + std::to_string(slot.device_id) +
                      " but this rank's earlier CUDA tensors of the process set are on device " +
                      std::to_string(device_) + ": each rank uses one GPU (select it with torch.cuda.set_device("
                      "hvd.local_rank()) or CUDA_VISIBLE_DEVICES)",
                  slot.meta.name);
    }
    if (local.handle->ready_event != nullptr) {
      gpu_call("ordering hvd's stream after the framework's", api_->stream_wait_event, stream_,
               local.handle->ready_event);
    }
  }
}

void GpuDataPlane::end() {
  if (completions_.empty()) return;
  std::vector<Completion> done;
  done.swap(completions_);
  hvd_gpu_status status{};
  hvd_gpu_event* mark = api_->stream_mark(stream_, &status);
  if (mark == nullptr) {
    // The tensors are out of in_flight_ already: fail them here.
    Error error(ErrorCode::kInternal, std::string("CUDA error after queueing a collective: ") + status.message);
    for (Completion& c : done) handle_complete_tensor(c.local.handle, c.local.index, &error);
    throw error;
  }
  pending_.push_back(Pending{mark, std::move(done)});
}

void GpuDataPlane::poll() {
  while (!pending_.empty()) {
    hvd_gpu_status status{};
    int state = api_->event_query(pending_.front().done, &status);
    if (state == 0) break;
    if (state < 0) throw_error(ErrorCode::kInternal, std::string("the GPU failed a collective: ") + status.message);
    Pending finished = std::move(pending_.front());
    pending_.pop_front();
    api_->event_destroy(finished.done);
    for (Completion& c : finished.completions) {
      handle_complete_tensor(c.local.handle, c.local.index, c.error ? &*c.error : nullptr);
    }
  }
  if (nccl_comm_ != nullptr) gpu_call("NCCL", api_->nccl_comm_check, nccl_comm_);
}

void GpuDataPlane::abort(const Error& error) {
  // Ends kernels that wait for a peer that will never come.
  hierarchical_.reset();
  if (local_comm_ != nullptr) {
    api_->nccl_comm_abort(local_comm_);
    local_comm_ = nullptr;
  }
  if (nccl_comm_ != nullptr) {
    api_->nccl_comm_abort(nccl_comm_);
    nccl_comm_ = nullptr;
    nccl_.reset();
  }
  discard_completions();  // still in the process set's in-flight table, failed there
  fail_pending(error);
}

void GpuDataPlane::fail_pending(const Error& error) {
  while (!pending_.empty()) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    api_->event_destroy(p.done);
    for (Completion& c : p.completions) handle_complete_tensor(c.local.handle, c.local.index, &error);
  }
}

void GpuDataPlane::copy(void* dst, const void* src, size_t bytes) {
  gpu_call("copy", api_->copy, stream_, dst, src, bytes, static_cast<int32_t>(HVD_GPU_DEVICE_TO_DEVICE));
}

void GpuDataPlane::zero(void* dst, size_t bytes) { gpu_call("zero fill", api_->zero, stream_, dst, bytes); }

void GpuDataPlane::copy_scaled(const CopySpec* copies, size_t n, DataType dtype, double factor) {
  if (n > 0) {
    gpu_call("packing or scaling tensors", api_->copy_scaled, stream_, copies, n, static_cast<int32_t>(dtype), factor);
  }
}

void* GpuDataPlane::grow(DeviceBuffer& buffer, size_t bytes) {
  if (bytes > buffer.capacity) {
    release(buffer);  // frees after the queued work that uses it
    const size_t rounded = round_up_to_mib(bytes);
    hvd_gpu_status status{};
    buffer.data = api_->device_alloc(device_, rounded, &status);
    if (buffer.data == nullptr) throw_gpu_status(status, "allocating " + std::to_string(rounded) + " bytes on the GPU");
    buffer.capacity = rounded;
  }
  return buffer.data;
}

void GpuDataPlane::release(DeviceBuffer& buffer) {
  api_->device_free(device_, buffer.data);
  buffer = DeviceBuffer{};
}

void* GpuDataPlane::fusion_buffer(size_t bytes) { return grow(fusion_, bytes); }
void* GpuDataPlane::scratch(size_t bytes) { return grow(scratch_, bytes); }

DLManagedTensor* GpuDataPlane::make_owned(const std::vector<int64_t>& shape, DataType dtype) {
  const hvd_gpu_plugin* api = api_;
  const int device = device_;
  MemoryResource gpu_memory{DLDevice{kDLCUDA, device},
                            [api, device](size_t bytes) {
                              hvd_gpu_status status{};
                              void* data = api->device_alloc(device, bytes, &status);
                              if (data == nullptr) throw_gpu_status(status, "allocating a result on the GPU");
                              return data;
                            },
                            [api, device](void* data) { api->device_free(device, data); }};
  return make_owned_tensor(shape, dtype, &gpu_memory);
}

void* GpuDataPlane::host_view(void* data, size_t bytes) {
  unsigned char* host = host_view_->get(bytes);
  gpu_call("staging for Adasum", api_->copy, stream_, static_cast<void*>(host), static_cast<const void*>(data), bytes,
           static_cast<int32_t>(HVD_GPU_DEVICE_TO_HOST));
  gpu_call("staging for Adasum", api_->stream_synchronize, stream_);
  return host;
}

void GpuDataPlane::write_back(void* data, const void* host, size_t bytes) {
  host_view_->copy_to_device(data, host, bytes, "staging for Adasum");
}

}  // namespace hvd
