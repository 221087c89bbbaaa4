#pragma once

// Where the tests find what the build made and what the repository carries: the shardload binary under
// test, the source tree, the real configs, the LeakSanitizer suppressions of OpenMPI. The paths are compiled
// into test_paths.cc alone, so that every other test file compiles to the same object in any clone (the
// compiler cache of `make test` shares them between clones: see the Makefile).

#include <string>

namespace shardload::testing {

// The shardload binary of this build.
const std::string& shardload_bin();
// The repository's root.
const std::string& source_dir();
// tests/data/configs: the real config.json files the repository carries.
const std::string& test_configs_dir();
// tests/distributed/lsan_mpi.supp.
const std::string& lsan_mpi_suppressions();

}  // namespace shardload::testing
