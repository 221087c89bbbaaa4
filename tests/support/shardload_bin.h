#pragma once

// What tests of the command line share: running the shardload binary under test (shardload_bin(),
// test_paths.h) and making the tiny checkpoint it is run on.

#include <cstdint>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload::testing {

// Runs `shardload ARGS...` and waits for it.
inline CommandResult run_shardload(std::vector<std::string> args) {
  args.insert(args.begin(), testing::shardload_bin());
  return run_command(args);
}

// A tiny checkpoint of ARCH at DIR/model; the seed picks its values.
inline std::string make_tiny_model(const TempDir& dir, const std::string& arch, uint64_t seed) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file("model");
  options.seed = seed;
  make_tiny(options);
  return options.out;
}

}  // namespace shardload::testing
