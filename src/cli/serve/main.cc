// shardload-serve: the weight server, a program of its own so that cpp-httplib and the OpenSSL,
// zlib and brotli libraries it links are loaded only by the server, not at every `shardload load`
// (they cost a few milliseconds of start-up, measured in bench/report.md). `shardload serve ARGS`
// runs `shardload-serve ARGS` from the same directory.
#include <CLI/CLI.hpp>

#include "cli/process_transport.h"
#include "cli/run_app.h"
#include "cli/serve/serve_command.h"

int main(int argc, char** argv) {
  // Building the options allocates too: anything thrown is one error line, never an abort.
  return shardload::cli::run_guarded([&] {
    CLI::App app{shardload::cli::kServeDescription, "shardload serve"};
    shardload::cli::add_serve_options(app);
    const int status = shardload::cli::run_app(app, argc, argv);
    shardload::cli::end_process_transport();  // under mpirun: every node printed its outcome
    return status;
  });
}
