#include "distributed/transfer_buffer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "core/fault_injection.h"
#include "format/posix_io.h"
#include "load/direct_reader.h"

namespace shardload::distributed {

Buffer make_buffer(uint64_t bytes) {
  const uint64_t size = (bytes + 2 * load::kDirectAlignment + load::kDirectAlignment - 1) &
                        ~(load::kDirectAlignment - 1);
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(load::kDirectAlignment, size)),
                std::free);
}

const std::byte* read_direct(int fd, std::byte* buffer, uint64_t offset, uint64_t bytes,
                             const ErrorDetails& where) {
  const uint64_t begin = offset & ~(load::kDirectAlignment - 1);
  const uint64_t end =
      (offset + bytes + load::kDirectAlignment - 1) & ~(load::kDirectAlignment - 1);
  fault::before_read(bytes, where);
  uint64_t done = 0;
  while (begin + done < offset + bytes) {
    const ssize_t n =
        pread(fd, buffer + done, end - begin - done, static_cast<off_t>(begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw format::io_error("read failed", errno, where);
    if (n == 0)
      throw Error(ErrorKind::kIo,
                  "the file ended before the tensor's bytes (truncated while loading?)", where);
    done += static_cast<uint64_t>(n);
  }
  fault::after_read(bytes);
  return buffer + (offset - begin);
}

}  // namespace shardload::distributed
