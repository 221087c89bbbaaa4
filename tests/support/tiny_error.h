#pragma once

// The error make_tiny throws for a set of options, for the generator's tests that expect one.

#include <gtest/gtest.h>

#include "shardload/error.h"
#include "shardload/tiny.h"

namespace shardload::testing {

// No error is a test failure (and a kIo error is returned, so that the caller's expectation fails too).
inline Error make_tiny_error(const TinyOptions& options) {
  try {
    make_tiny(options);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "make_tiny did not throw";
  return Error(ErrorKind::kIo, "no error");
}

}  // namespace shardload::testing
