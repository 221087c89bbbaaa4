#include "format/posix_io.h"

#include "core/fault_injection.h"

#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardload::format {

Error io_error(std::string what, int error_number, ErrorDetails where) {
  return Error(ErrorKind::kIo, fmt::format("{}: {}", what, std::strerror(error_number)),
               std::move(where));
}

void pread_exact(int fd, std::span<std::byte> dst, uint64_t offset, const ErrorDetails& where) {
  fault::before_read(dst.size(), where);
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
  fault::after_read(dst.size());
}

void preadv_exact(int fd, std::span<struct iovec> segments, uint64_t offset,
                  const ErrorDetails& where) {
  uint64_t total = 0;
  for (const iovec& s : segments) total += s.iov_len;
  fault::before_read(total, where);
  uint64_t done = 0;
  size_t first = 0;
  while (first < segments.size()) {
    if (segments[first].iov_len == 0) {
      ++first;
      continue;
    }
    const int count = static_cast<int>(std::min<size_t>(segments.size() - first, IOV_MAX));
    const ssize_t got = ::preadv(fd, &segments[first], count, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw io_error(
          fmt::format("read of {} bytes at offset {} failed", total - done, offset + done), errno,
          where);
    }
    if (got == 0) {
      ErrorDetails details = where;
      details.expected = fmt::format("{} bytes at offset {}", total, offset);
      details.found = fmt::format("{} bytes", done);
      throw Error(ErrorKind::kIo, "unexpected end of file (was it truncated?)", std::move(details));
    }
    done += static_cast<uint64_t>(got);
    for (size_t left = static_cast<size_t>(got); left > 0;) {  // consume what arrived
      const size_t take = std::min(left, segments[first].iov_len);
      segments[first].iov_base = static_cast<std::byte*>(segments[first].iov_base) + take;
      segments[first].iov_len -= take;
      left -= take;
      if (segments[first].iov_len == 0) ++first;
    }
  }
  fault::after_read(total);
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
