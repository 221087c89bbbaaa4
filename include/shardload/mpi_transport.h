#pragma once

#include <memory>

#include "shardload/transport.h"

namespace shardload {

// True when an MPI launcher (mpirun, srun) started this process: its environment names a rank.
bool launched_by_mpi();
// Whether this build has the MPI backend (CMake found MPI; SHARDLOAD_MPI=OFF turns it off).
bool mpi_available();

// The MPI backend: initializes MPI (thread level serialized) on MPI_COMM_WORLD, one node per
// process, and finalizes it when destroyed. No call carries 2 GiB or more: larger transfers go as
// several messages. Throws Error(kInvalidArgument) in a build without MPI, Error(kNode) when MPI
// cannot start. One per process.
std::unique_ptr<Transport> make_mpi_transport();

}  // namespace shardload
