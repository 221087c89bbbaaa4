#include "serve/shm_rank_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "serve/errno_error.h"
#include "serve/shm_layout.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {
ShmRankFile::~ShmRankFile() { close(); }

ShmRankFile::ShmRankFile(ShmRankFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      file_bytes_(other.file_bytes_),
      header_(std::move(other.header_)) {}

ShmRankFile& ShmRankFile::operator=(ShmRankFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    file_bytes_ = other.file_bytes_;
    header_ = std::move(other.header_);
  }
  return *this;
}

void ShmRankFile::close() {
  header_ = AlignedBuffer();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ShmRankFile ShmRankFile::open_existing(const ShmDir& dir, const std::string& name,
                                       std::string* why) {
  ShmRankFile file;
  file.path_ = dir.file_path(name);
  file.fd_ = dir.open_own_file(name, O_RDWR, why);
  if (file.fd_ < 0) return {};
  struct stat st {};
  if (fstat(file.fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < kShmHeaderBytes) {
    *why = fmt::format("{} is not a rank file of at least {} bytes", file.path_, kShmHeaderBytes);
    return {};
  }
  file.file_bytes_ = static_cast<uint64_t>(st.st_size);
  try {
    dir.apply_file_access(file.fd_, name);
    file.header_ = AlignedBuffer::map_file(file.fd_, 0, kShmHeaderBytes);
  } catch (const Error& e) {
    *why = fmt::format("{} cannot be used ({})", file.path_, e.what());
    return {};
  }
  return file;
}

ShmRankFile ShmRankFile::create_double(const ShmDir& dir, const std::string& name, uint64_t data_bytes) {
  return create(dir, name, 2 * shm_slot_bytes(data_bytes));
}

AlignedBuffer ShmRankFile::map_slot(int slot, uint64_t data_bytes) const {
  try {
    return AlignedBuffer::map_file(fd_, kShmHeaderBytes + static_cast<uint64_t>(slot) * shm_slot_bytes(data_bytes),
                                   data_bytes);
  } catch (const Error& e) {
    throw e.with_file(path_);
  }
}

ShmRankFile ShmRankFile::create(const ShmDir& dir, const std::string& name, uint64_t data_bytes) {
  ShmRankFile file;
  file.path_ = dir.file_path(name);
  file.fd_ = dir.create_file(name, /*replace=*/true);
  file.file_bytes_ = kShmHeaderBytes + data_bytes;
  // Reserving every page now turns a full /dev/shm into an error here rather than a SIGBUS on the
  // first write to a page tmpfs cannot back. The pages read as zero, as the loader expects of a new
  // buffer.
  const int rc = ::posix_fallocate(file.fd_, 0, static_cast<off_t>(file.file_bytes_));
  if (rc != 0) {
    errno = rc;
    throw errno_error(fmt::format("reserving {} bytes", file.file_bytes_), file.path_);
  }
  file.header_ = AlignedBuffer::map_file(file.fd_, 0, kShmHeaderBytes);
  init_header(file.header_.data());
  return file;
}

AlignedBuffer ShmRankFile::map_data() const {
  try {
    return AlignedBuffer::map_file(fd_, kShmHeaderBytes, file_bytes_ - kShmHeaderBytes);
  } catch (const Error& e) {
    throw e.with_file(path_);
  }
}

}  // namespace shardload::serve
