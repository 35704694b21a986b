// communicator.cc - create_communicator: picks the solo transport for one
// member, else MPI, shared memory, hierarchical or flat TCP from where the
// members run and what the options allow.
#include "transport/communicator.h"

#include <map>

#include "common/error.h"
#include "common/logging.h"
#include "transport/hierarchical_communicator.h"
#include "transport/mpi/mpi_communicator.h"
#include "transport/shm/shm_communicator.h"
#include "transport/solo_communicator.h"
#include "transport/tcp/tcp_communicator.h"

namespace hvd {

void Communicator::allreduce_parts(const std::vector<ArrayPart>&, const std::vector<ArrayPart>&, size_t, DataType,
                                   ReduceOp, double) {
  throw Error(ErrorCode::kInternal, transport_name() + " cannot reduce an array in parts; pack it first");
}

std::unique_ptr<Communicator> create_communicator(const CommOptions& options, Store& store,
                                                  ConnectionManager* connections) {
  const int size = static_cast<int>(options.global_ranks.size());
  if (size == 0 || options.rank < 0 || options.rank >= size) {
    throw_error(ErrorCode::kInvalidArgument, "create_communicator('" + options.key + "'): rank " +
                                                 std::to_string(options.rank) + " is not among " +
                                                 std::to_string(size) + " members");
  }
  if (!options.hosts.empty() && static_cast<int>(options.hosts.size()) != size) {
    throw_error(ErrorCode::kInvalidArgument, "create_communicator('" + options.key + "'): " +
                                                 std::to_string(options.hosts.size()) + " host names for " +
                                                 std::to_string(size) + " members");
  }
  // Alone, there is nothing to connect, whatever transport the options ask for.
  if (size == 1) return std::make_unique<SoloCommunicator>();
  if (options.use_mpi) return create_mpi_communicator(options);
  // Members grouped by host, hosts in order of first appearance.
  std::vector<std::vector<int>> host_members;
  std::map<std::string, size_t> host_index;
  for (int m = 0; m < size; ++m) {
    std::string host = options.hosts.empty() ? std::string() : options.hosts[m];
    auto it = host_index.find(host);
    if (it == host_index.end()) {
      it = host_index.emplace(host, host_members.size()).first;
      host_members.emplace_back();
    }
    host_members[it->second].push_back(m);
  }
  if (host_members.size() == 1 && options.allow_shm) {
    return std::make_unique<ShmCommunicator>(options, store);
  }
  if (host_members.size() > 1 && options.allow_shm && (options.hierarchical || options.hierarchical_allgather)) {
    bool uniform = true;
    for (const auto& members : host_members) uniform = uniform && members.size() == host_members[0].size();
    if (uniform && host_members[0].size() > 1) {
      return std::make_unique<HierarchicalCommunicator>(options, host_members, store, *connections);
    }
    if (!uniform) {
      HVD_LOG(kInfo, "process set '" << options.key << "': hosts run different numbers of members, "
                                     << "using flat TCP instead of hierarchical collectives");
    }
  }
  return std::make_unique<TcpCommunicator>(options, *connections);
}

}  // namespace hvd
