// mpi_communicator.h - the MPI data plane (HOROVOD_CPU_OPERATIONS=mpi).
//
// libhvd_core never links MPI: the MPI library is opened at run time
// (HVD_MPI_LIBRARY, else the libmpi already loaded or found by the loader)
// and driven through its C ABI. Two ABIs exist in the wild and both are
// handled: Open MPI's (handles are pointers to predefined global objects)
// and MPICH's (handles are 32-bit integers with fixed values). The control
// plane - negotiation, rendezvous, heartbeats - stays hvd's own; only the
// collectives' data moves through MPI, on one MPI communicator per process
// set (MPI_Comm_create_group over the set's global ranks, which must equal
// the MPI_COMM_WORLD ranks - true under mpirun and horovodrun --mpi).
//
// Limits, as with any MPI: a blocked MPI call cannot be interrupted, so a
// dead peer is handled by the MPI launcher (which stops the job), not by
// abort(); messages are limited to INT_MAX elements per call (allreduce is
// chunked, the other collectives throw beyond that).
#pragma once

#include <memory>
#include <string>

#include "transport/communicator.h"

namespace hvd {

// Builds the MPI communicator for `options` (collective over its members).
// Throws Error(kInvalidArgument) with a clear message when no usable MPI
// library is found, MPI was started without MPI_THREAD_MULTIPLE, or the
// job's ranks do not match MPI_COMM_WORLD's.
std::unique_ptr<Communicator> create_mpi_communicator(const CommOptions& options);

}  // namespace hvd
