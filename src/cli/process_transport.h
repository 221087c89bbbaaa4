#pragma once

#include "shardload/transport.h"

namespace shardload::cli {

// This process's transport to the other nodes (MPI), made at the first call. It lives until
// end_process_transport(), which main calls once the command's outcome, an error included, was
// printed: MPI's shutdown waits for every node, and a node that exits first makes the launcher end
// the others, maybe before they printed.
Transport& process_transport();
void end_process_transport();

}  // namespace shardload::cli
