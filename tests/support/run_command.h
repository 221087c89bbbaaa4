#pragma once

#include <string>
#include <vector>

namespace shardload::testing {

struct CommandResult {
  int exit_code = -1;  // 128 + signal number when killed by a signal
  std::string out;
  std::string err;
};

// Runs a program (argv[0] is its path) with the given arguments, waits for it and captures its output.
CommandResult run_command(const std::vector<std::string>& argv);

}  // namespace shardload::testing
