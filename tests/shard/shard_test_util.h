#pragma once

// What the sharding tests share: running the shardload binary, the replayable seed, and tiny
// checkpoints generated once per test program.

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "run_command.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload::testing {

inline CommandResult shardload_cli(std::vector<std::string> args) {
  args.insert(args.begin(), testing::shardload_bin());
  return run_command(args);
}

// The seed of every generated checkpoint; SHARDLOAD_TEST_SEED replays a failure. Printed once.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("SHARDLOAD_TEST_SEED");
    const uint64_t value = env != nullptr ? std::strtoull(env, nullptr, 10) : 20261129;
    std::cout << "shardload test seed: " << value << " (set SHARDLOAD_TEST_SEED to replay)\n";
    return value;
  }();
  return seed;
}

// The tiny checkpoint of a family (make-tiny --arch ARCH) with the test seed, made on first use and
// kept for the whole program: the generator is not what these tests are about, and regenerating
// would dominate their time.
inline const std::string& tiny_model(const std::string& arch) {
  static TempDir root;
  static std::map<std::string, std::string> made;
  const auto it = made.find(arch);
  if (it != made.end()) return it->second;
  const std::string dir = root.file(arch);
  make_tiny({.arch = arch, .out = dir, .seed = test_seed()});
  return made.emplace(arch, dir).first->second;
}

}  // namespace shardload::testing
