#include "cli/run_app.h"

#include <unistd.h>

#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

#include "core/admission.h"

namespace shardload::cli {
namespace {

// One write of the whole line: under mpirun every node's stderr shares one stream, and after an
// allocation failed a stream may not be able to grow its buffer.
void write_line(std::string_view line) noexcept {
  while (!line.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    if (n <= 0) return;
    line.remove_prefix(static_cast<size_t>(n));
  }
}

std::string failure_line(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::bad_alloc&) {
    return "error: out of memory: an allocation failed" + memory_limits_note() + "\n";
  } catch (const std::system_error& e) {
    // What std::thread throws when the kernel refuses a thread (its stack is address space too).
    if (e.code() == std::errc::resource_unavailable_try_again) {
      return std::string("error: ") + e.what() + ": a thread could not be started" +
             memory_limits_note() + "\n";
    }
    return std::string("error: ") + e.what() + "\n";
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what() + "\n";
  } catch (...) {
    return "error: an unknown exception\n";
  }
}

}  // namespace

int report_failure(std::exception_ptr failure) noexcept {
  std::cout.flush();
  try {
    write_line(failure_line(failure));
  } catch (...) {
    write_line("error: out of memory\n");  // not even the message could be built
  }
  return 1;
}

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --help-all, --version: printed, exit status 0
  } catch (const CLI::ParseError& e) {
    // One line, like every other error: usage errors are bad input too.
    // One write per line: under mpirun every node's stderr shares one stream.
    std::cerr << std::string("error: ") + e.what() + " (run with --help for usage)\n";
    return 2;
  } catch (...) {
    return report_failure(std::current_exception());
  }
  return 0;
}

}  // namespace shardload::cli
