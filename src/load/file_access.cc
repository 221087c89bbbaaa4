#include "load/file_access.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "format/posix_io.h"

namespace shardload::load {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

MappedFile::~MappedFile() {
  if (data != nullptr) ::munmap(const_cast<std::byte*>(data), size);
}

void MappedFile::map(const SafetensorsFile& file) {
  struct stat st {};
  if (::fstat(file.fd(), &st) != 0)
    throw format::io_error("cannot stat", errno, {.file = file.path()});
  size = static_cast<uint64_t>(st.st_size);  // now, not at open: the file may have shrunk since
  if (size == 0) return;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd(), 0);
  if (p == MAP_FAILED) throw format::io_error("cannot mmap", errno, {.file = file.path()});
  ::madvise(p, size, MADV_SEQUENTIAL);
  data = static_cast<const std::byte*>(p);
}

double page_cache_fraction(const std::vector<const SafetensorsFile*>& files) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t total = 0;
  uint64_t cached = 0;
  std::vector<unsigned char> resident;
  for (const SafetensorsFile* file : files) {
    const uint64_t size = file->file_size();
    total += size;
    if (size == 0) continue;
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file->fd(), 0);
    if (p == MAP_FAILED) continue;
    resident.assign((size + page - 1) / page, 0);
    if (::mincore(p, size, resident.data()) == 0) {
      for (unsigned char r : resident) cached += (r & 1) != 0 ? page : 0;
    }
    ::munmap(p, size);
  }
  return total == 0 ? 1.0
                    : static_cast<double>(std::min(cached, total)) / static_cast<double>(total);
}

}  // namespace shardload::load
