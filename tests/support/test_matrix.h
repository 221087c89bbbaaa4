#pragma once

// The C++ tests' cross-products `make test` leaves to `make test-matrix` (docs/testing.md "The gate and the
// matrix"): a case that adds no kind of work the gate's cases do not already cover runs only with
// SHARDLOAD_TEST_MATRIX set, and says that it skipped otherwise.

#include <cstdlib>

namespace shardload::testing {

inline bool matrix_run() { return std::getenv("SHARDLOAD_TEST_MATRIX") != nullptr; }

}  // namespace shardload::testing
