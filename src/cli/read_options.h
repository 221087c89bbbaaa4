#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "shardload/distributed.h"

namespace shardload::cli {

// --read striped|local: who reads the checkpoint when several nodes load one layout.
struct ReadOptions {
  std::string read = "striped";

  ReadPolicy policy() const;
};

void add_read_option(CLI::App& cmd, ReadOptions& options);

}  // namespace shardload::cli
