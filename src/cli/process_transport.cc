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
  holder().reset();
}

}  // namespace shardload::cli
