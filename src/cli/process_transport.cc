#include "cli/process_transport.h"

#include <iostream>
#include <memory>

#include "shardload/mpi_transport.h"

namespace shardload::cli {
namespace {

std::unique_ptr<Transport>& holder() {
  static std::unique_ptr<Transport> transport;
  return transport;
}

}  // namespace

Transport& process_transport() {
  if (!holder()) holder() = make_mpi_transport();
  return *holder();
}

void end_process_transport() {
  std::cout.flush();
  std::cerr.flush();
  if (!holder()) return;
  // Every node has printed once every node reaches this gather: only then may one exit (a node that
  // leaves MPI unfinalized after an error exits at once, and the launcher ends the others).
  try {
    holder()->all_gather("");
  } catch (const std::exception&) {  // the transport is gone: nothing left to wait for
  }
  holder().reset();
}

}  // namespace shardload::cli
