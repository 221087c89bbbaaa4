#include "cli/process_transport.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>

#include "shardload/mpi_transport.h"

namespace shardload::cli {
namespace {

std::unique_ptr<Transport>& holder() {
  static std::unique_ptr<Transport> transport;
  return transport;
}

double& stall_timeout_seconds() {
  static double seconds = 300;
  return seconds;
}

}  // namespace

Transport& process_transport() {
  if (!holder()) {
    holder() = make_mpi_transport();
    const double seconds = stall_timeout_seconds();
    const int64_t ms = seconds > 0 ? std::max<int64_t>(1, std::llround(seconds * 1000)) : 0;
    holder()->set_stall_timeout(std::chrono::milliseconds(ms));
  }
  return *holder();
}

void add_stall_timeout_option(CLI::App& cmd) {
  cmd.add_option("--stall-timeout", stall_timeout_seconds(),
                 "Under mpirun: SECONDS a node waits on a peer that sends nothing before every "
                 "node reports that peer stalled and the job ends (0: wait forever)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
}

void end_process_transport() {
  std::cout.flush();
  std::cerr.flush();
  if (!holder()) return;
  // Every node has printed once every node reaches this gather: only then may one exit (a node that
  // leaves MPI unfinalized after an error exits at once, and the launcher ends the others).
  // After a stall the live nodes meet in the transport's destructor instead, which ends the job.
  if (!holder()->stalled()) {
    try {
      holder()->all_gather("");
    } catch (const std::exception& e) {  // the transport is gone: nothing left to wait for
      // A peer that stalled here, after the command: its error was not printed yet.
      if (holder()->stalled()) std::cerr << std::string("error: ") + e.what() + "\n" << std::flush;
    }
  }
  holder().reset();
}

}  // namespace shardload::cli
