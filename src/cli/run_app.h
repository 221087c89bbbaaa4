#pragma once

#include <CLI/CLI.hpp>

namespace shardload::cli {

// Parses the command line and runs the chosen callback. Returns the exit status: 0, 1 after one
// `error: ...` line for shardload::Error and other exceptions, 2 for a usage error (any
// CLI::ParseError, UsageError included).
int run_app(CLI::App& app, int argc, char** argv);

}  // namespace shardload::cli
