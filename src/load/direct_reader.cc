#include "load/direct_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "core/fault_injection.h"
#include "format/posix_io.h"

namespace shardload::load {
namespace {

uint64_t align_down(uint64_t v) { return v & ~(kDirectAlignment - 1); }
uint64_t align_up(uint64_t v) { return align_down(v + kDirectAlignment - 1); }

}  // namespace

int open_direct(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
}

std::vector<UniqueFd> open_direct_files(const std::vector<SafetensorsFile>& files,
                                        const std::vector<uint32_t>& used, bool required) {
  std::vector<UniqueFd> fds(files.size());
  for (uint32_t f : used) {
    fds[f].reset(open_direct(files[f].path()));
    if (fds[f].get() >= 0) continue;
    if (!required) return {};
    throw format::io_error("cannot open with O_DIRECT (--io direct)", errno,
                           {.file = files[f].path()});
  }
  return fds;
}

const std::byte* read_direct(int fd, std::byte* buffer, uint64_t offset, uint64_t bytes,
                             const ErrorDetails& where) {
  const uint64_t begin = align_down(offset);
  const uint64_t length = align_up(offset + bytes) - begin;
  const uint64_t needed = offset + bytes - begin;
  fault::before_read(bytes, where);
  uint64_t got = 0;
  while (got < needed) {
    const ssize_t n = ::pread(fd, buffer + got, length - got, static_cast<off_t>(begin + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw format::io_error(fmt::format("direct read of {} bytes at offset {} failed", bytes, offset),
                             errno, where);
    }
    if (n == 0) {  // the file ended first
      ErrorDetails details = where;
      details.expected = fmt::format("{} bytes at offset {}", bytes, offset);
      details.found = fmt::format("{} bytes", got > offset - begin ? got - (offset - begin) : 0);
      throw Error(ErrorKind::kIo, "unexpected end of file (was it truncated?)", std::move(details));
    }
    got += static_cast<uint64_t>(n);
  }
  fault::after_read(bytes);
  return buffer + (offset - begin);
}

DirectReader::DirectReader(unsigned depth, uint64_t max_bytes, bool use_io_uring) {
  slots_.resize(depth == 0 ? 1 : depth);
  for (Slot& slot : slots_)
    slot.buffer = AlignedBuffer(max_bytes + 2 * kDirectAlignment, kDirectAlignment);
  ring_ready_ =
      use_io_uring && io_uring_queue_init(static_cast<unsigned>(slots_.size()), &ring_, 0) == 0;
}

DirectReader::~DirectReader() {
  if (!ring_ready_) return;
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;  // the ring itself failed: nothing more will complete
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  io_uring_queue_exit(&ring_);
}

void DirectReader::submit(int fd, uint64_t offset, uint64_t bytes, uint64_t tag,
                          const ErrorDetails& where) {
  fault::before_read(bytes, where);
  const uint32_t index = (oldest_ + queued_) % static_cast<uint32_t>(slots_.size());
  Slot& slot = slots_[index];
  slot.fd = fd;
  slot.aligned_offset = align_down(offset);
  slot.lead = offset - slot.aligned_offset;
  slot.needed = slot.lead + bytes;
  slot.length = align_up(slot.needed);
  slot.got = 0;
  slot.tag = tag;
  slot.done = false;
  slot.error = 0;
  slot.where = where;
  ++queued_;
  if (ring_ready_) {
    start_read(index);
  } else {
    read_sync(index);
  }
}

void DirectReader::start_read(uint32_t index) {
  Slot& slot = slots_[index];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // cannot happen: one request per slot and the ring has a slot's worth
    throw Error(ErrorKind::kIo, "io_uring submission queue full", slot.where);
  }
  io_uring_prep_read(sqe, slot.fd, slot.buffer.data() + slot.got,
                     static_cast<unsigned>(slot.length - slot.got), slot.aligned_offset + slot.got);
  io_uring_sqe_set_data64(sqe, index);
  int rc = 0;
  do {
    rc = io_uring_submit(&ring_);
  } while (rc == -EINTR || rc == -EAGAIN);
  if (rc < 0) throw format::io_error("io_uring submit failed", -rc, slot.where);
  ++in_flight_;
}

void DirectReader::complete(uint32_t index, int result) {
  Slot& slot = slots_[index];
  if (result == -EINTR || result == -EAGAIN) {
    start_read(index);
    return;
  }
  if (result < 0) {
    slot.error = -result;
    slot.done = true;
    return;
  }
  slot.got += static_cast<uint64_t>(result);
  // A short read that is not block aligned means the file ended: only what was asked for matters.
  if (slot.got >= slot.needed || result == 0 || slot.got % kDirectAlignment != 0) {
    slot.done = true;
    return;
  }
  start_read(index);
}

void DirectReader::wait_one() {
  io_uring_cqe* cqe = nullptr;
  int rc = 0;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) throw format::io_error("io_uring wait failed", -rc, slots_[oldest_].where);
  const auto index = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
  const int result = cqe->res;
  io_uring_cqe_seen(&ring_, cqe);
  --in_flight_;
  complete(index, result);
}

void DirectReader::read_sync(uint32_t index) {
  Slot& slot = slots_[index];
  while (!slot.done) {
    const ssize_t got = ::pread(slot.fd, slot.buffer.data() + slot.got, slot.length - slot.got,
                                static_cast<off_t>(slot.aligned_offset + slot.got));
    complete(index, got < 0 ? -errno : static_cast<int>(got));
  }
}

DirectReader::Done DirectReader::wait_oldest() {
  Slot& slot = slots_[oldest_];
  while (!slot.done) wait_one();
  const uint64_t bytes = slot.needed - slot.lead;
  if (slot.error != 0) {
    throw format::io_error(fmt::format("direct read of {} bytes at offset {} failed", bytes,
                                       slot.aligned_offset + slot.lead),
                           slot.error, slot.where);
  }
  if (slot.got < slot.needed) {
    ErrorDetails details = slot.where;
    details.expected = fmt::format("{} bytes at offset {}", bytes, slot.aligned_offset + slot.lead);
    details.found = fmt::format("{} bytes", slot.got > slot.lead ? slot.got - slot.lead : 0);
    throw Error(ErrorKind::kIo, "unexpected end of file (was it truncated?)", std::move(details));
  }
  fault::after_read(bytes);
  return {slot.tag, slot.buffer.data() + slot.lead};
}

void DirectReader::pop_oldest() {
  oldest_ = (oldest_ + 1) % static_cast<uint32_t>(slots_.size());
  --queued_;
}

}  // namespace shardload::load
