#include "cli/run_app.h"

#include <exception>
#include <iostream>

namespace shardload::cli {

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --help-all, --version: printed, exit status 0
  } catch (const CLI::ParseError& e) {
    // One line, like every other error: usage errors are bad input too.
    // One write per line: under mpirun every node's stderr shares one stream.
    std::cerr << std::string("error: ") + e.what() + " (run with --help for usage)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << std::string("error: ") + e.what() + "\n";
    return 1;
  }
  return 0;
}

}  // namespace shardload::cli
