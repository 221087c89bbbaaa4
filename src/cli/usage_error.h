#pragma once

#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "shardload/error.h"

namespace shardload::cli {

// A usage error found only after parsing: a flag value that is wrong on its own or for the model,
// the export or another flag (--rank past the layout, an unknown --arch). It is one of CLI11's
// parse errors, so run_app reports it as it does a bad flag, with exit status 2; errors in the data
// (files, JSON) stay exit status 1.
class UsageError : public CLI::ParseError {
 public:
  explicit UsageError(const std::string& message)
      : CLI::ParseError("UsageError", message, CLI::ExitCodes::ValidationError) {}
};

// Runs f; an Error(kInvalidArgument) it throws is a usage error. Only for calls whose
// kInvalidArgument errors are all about the arguments (make_tiny's options, a byte size): not for
// those reading files.
template <class F>
decltype(auto) as_usage_error(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument) throw UsageError(e.what());
    throw;
  }
}

}  // namespace shardload::cli
