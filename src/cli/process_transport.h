#pragma once

#include <CLI/CLI.hpp>

#include "shardload/transport.h"

namespace shardload::cli {

// This process's transport to the other nodes (MPI), made at the first call. It lives until
// end_process_transport(), which main calls once the command's outcome, an error included, was
// printed: MPI's shutdown waits for every node, and a node that exits first makes the launcher end
// the others, maybe before they printed.
Transport& process_transport();
void end_process_transport();

// --stall-timeout SECONDS (load, export and serve under mpirun; default 300): the transport's stall
// timeout (shardload/transport.h), set when process_transport() makes it.
void add_stall_timeout_option(CLI::App& cmd);

}  // namespace shardload::cli
