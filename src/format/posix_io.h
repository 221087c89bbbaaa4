#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "shardload/error.h"

namespace shardload::format {

// Reads exactly dst.size() bytes at `offset`, resuming after EINTR and short reads. Throws
// Error(kIo) with `where` (file, tensor) on failure or when the file ends first.
void pread_exact(int fd, std::span<std::byte> dst, uint64_t offset, const ErrorDetails& where);

// Reads consecutive file bytes starting at `offset` into the buffers `segments` (scatter), resuming
// after EINTR and short reads; any number of segments (split into IOV_MAX calls). The segments are
// advanced in place as they fill. Throws Error(kIo) like pread_exact.
void preadv_exact(int fd, std::span<struct iovec> segments, uint64_t offset,
                  const ErrorDetails& where);

// Writes all of src at the file position, resuming after EINTR and short writes. Throws Error(kIo).
void write_exact(int fd, std::span<const std::byte> src, const ErrorDetails& where);

// How many fresh names a writer tries for a temporary file or directory that it creates exclusively
// (O_EXCL, mkdir) before it gives up: names are unique per process (pid, counter, random bits), so a
// clash is the leftover of a killed process, and a run of them means something else is wrong.
inline constexpr int kTempNameAttempts = 100;

// An Error(kIo) for the failed call `what`, with errno's text.
Error io_error(std::string what, int error_number, ErrorDetails where);

}  // namespace shardload::format
