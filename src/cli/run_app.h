#pragma once

#include <exception>

#include <CLI/CLI.hpp>

namespace shardload::cli {

// Parses the command line and runs the chosen callback. Returns the exit status: 0, 1 after one
// `error: ...` line for shardload::Error and other exceptions, 2 for a usage error (any
// CLI::ParseError, UsageError included).
int run_app(CLI::App& app, int argc, char** argv);

// Prints one `error: ...` line for a failure that escaped (out of memory named as such, with the
// limits that apply) and returns exit status 1. Never throws.
int report_failure(std::exception_ptr failure) noexcept;

// What a program's main runs everything in, the building of its commands included: anything thrown
// is one error line and exit status 1, never an abort.
template <class Body>
int run_guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return report_failure(std::current_exception());
  }
}

}  // namespace shardload::cli
