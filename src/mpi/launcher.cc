#include <cstdlib>

#include "shardload/mpi_transport.h"

namespace shardload {

bool launched_by_mpi() {
  // OpenMPI's mpirun, and PMI / PMIx (srun, MPICH's and Intel's launchers).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

}  // namespace shardload
