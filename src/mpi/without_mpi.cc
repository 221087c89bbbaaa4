// The MPI backend of a build without MPI: every distributed command says so.
#include "shardload/error.h"
#include "shardload/mpi_transport.h"

namespace shardload {

bool mpi_available() { return false; }

std::unique_ptr<Transport> make_mpi_transport() {
  throw Error(
      ErrorKind::kInvalidArgument,
      "this shardload was built without MPI: install OpenMPI (libopenmpi-dev) and build again");
}

}  // namespace shardload
