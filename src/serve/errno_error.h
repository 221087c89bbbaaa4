#pragma once

#include <cerrno>
#include <string>

#include "format/posix_io.h"
#include "shardload/error.h"

namespace shardload {

// Error(kIo) for a failed system call on a file of the shared-memory store: "mkdir failed: <errno's
// text>", naming the file.
inline Error errno_error(const std::string& call, const std::string& path) {
  return format::io_error(call + " failed", errno, {.file = path});
}

}  // namespace shardload
