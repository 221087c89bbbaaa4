#include "format/posix_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace shardload::format {

Error io_error(std::string what, int error_number, ErrorDetails where) {
  return Error(ErrorKind::kIo, fmt::format("{}: {}", what, std::strerror(error_number)),
               std::move(where));
}

void pread_exact(int fd, std::span<std::byte> dst, uint64_t offset, const ErrorDetails& where) {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t got =
        ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw io_error(
          fmt::format("read of {} bytes at offset {} failed", dst.size() - done, offset + done),
          errno, where);
    }
    if (got == 0) {
      ErrorDetails details = where;
      details.expected = fmt::format("{} bytes at offset {}", dst.size(), offset);
      details.found = fmt::format("{} bytes", done);
      throw Error(ErrorKind::kIo, "unexpected end of file (was it truncated?)", std::move(details));
    }
    done += static_cast<size_t>(got);
  }
}

void write_exact(int fd, std::span<const std::byte> src, const ErrorDetails& where) {
  size_t done = 0;
  while (done < src.size()) {
    const ssize_t put = ::write(fd, src.data() + done, src.size() - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      throw io_error("write failed", errno, where);
    }
    if (put == 0) throw Error(ErrorKind::kIo, "write made no progress", where);
    done += static_cast<size_t>(put);
  }
}

}  // namespace shardload::format
