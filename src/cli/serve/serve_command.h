#pragma once

#include <CLI/CLI.hpp>

namespace shardload::cli {

inline constexpr const char* kServeDescription =
    "Serve the ranks' weights in shared memory (/dev/shm/shardload-NAME) with an HTTP API "
    "(127.0.0.1 unless --host) to update them in place";

// Adds the serve options and callback to `cmd`: the whole command line of shardload-serve, which
// `shardload serve` runs.
void add_serve_options(CLI::App& cmd);

}  // namespace shardload::cli
