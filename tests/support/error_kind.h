#pragma once

// The kind of the shardload::Error a call throws (and its message), for tests that expect one.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "shardload/error.h"

namespace shardload::testing {

// Runs f; returns the kind of the Error it throws (its what() in *message). No error is a test
// failure (and kIo is returned, so that the caller's expectation fails too).
inline ErrorKind kind_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kIo;
}

}  // namespace shardload::testing
