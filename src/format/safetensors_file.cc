#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "format/length_prefix.h"
#include "format/posix_io.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {

using format::kLengthBytes;

SafetensorsFile SafetensorsFile::open(const std::string& path, IoBackend backend) {
  SafetensorsFile file;  // its destructor closes what is opened here if validation throws
  file.path_ = path;
  file.backend_ = backend;
  // O_NONBLOCK: a FIFO named as a shard would block open() until a writer came; it is refused
  // below instead. On a regular file the flag changes nothing.
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd_ < 0) throw format::io_error("cannot open", errno, {.file = path});
  struct stat st {};
  if (::fstat(file.fd_, &st) != 0) throw format::io_error("cannot stat", errno, {.file = path});
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::kIo, "not a regular file", {.file = path});
  file.file_size_ = static_cast<uint64_t>(st.st_size);
  file.identity_ = {.device = static_cast<uint64_t>(st.st_dev),
                    .inode = static_cast<uint64_t>(st.st_ino),
                    .size = file.file_size_,
                    .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                                st.st_mtim.tv_nsec};

  if (backend == IoBackend::kMmap && file.file_size_ >= kLengthBytes) {
    void* map = ::mmap(nullptr, file.file_size_, PROT_READ, MAP_SHARED, file.fd_, 0);
    if (map == MAP_FAILED) throw format::io_error("cannot mmap", errno, {.file = path});
    file.map_ = static_cast<const std::byte*>(map);
    file.header_ = parse_safetensors_header({file.map_, file.file_size_}, file.file_size_, path);
    file.identity_.header_xxh3 = XXH3_64bits(file.map_, file.header_.data_start);
    return file;
  }

  // Read the length first and the JSON only when the length is plausible: a corrupt length must not
  // make us allocate up to the cap. Implausible lengths are left to the parser, which reports them.
  std::vector<std::byte> prefix(std::min(file.file_size_, kLengthBytes));
  format::pread_exact(file.fd_, prefix, 0, {.file = path});
  if (prefix.size() == kLengthBytes) {
    const uint64_t n = format::load_length(prefix.data());
    if (n <= kMaxHeaderBytes && n <= file.file_size_ - kLengthBytes) {
      prefix.resize(kLengthBytes + n);
      format::pread_exact(file.fd_, std::span(prefix).subspan(kLengthBytes), kLengthBytes,
                          {.file = path});
    }
  }
  file.header_ = parse_safetensors_header(prefix, file.file_size_, path);
  file.identity_.header_xxh3 = XXH3_64bits(prefix.data(), file.header_.data_start);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      file_size_(std::exchange(other.file_size_, 0)),
      identity_(other.identity_),
      fd_(std::exchange(other.fd_, -1)),
      backend_(other.backend_),
      map_(std::exchange(other.map_, nullptr)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    SafetensorsFile old(std::move(*this));  // released when it goes out of scope
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
    file_size_ = std::exchange(other.file_size_, 0);
    identity_ = other.identity_;
    fd_ = std::exchange(other.fd_, -1);
    backend_ = other.backend_;
    map_ = std::exchange(other.map_, nullptr);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), file_size_);
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// File offset of bytes [offset, offset + size) of the tensor, after checking that they lie inside
// the tensor and the tensor inside this file (a TensorInfo from another file would otherwise read
// anything).
uint64_t checked_file_offset(const SafetensorsHeader& header, uint64_t file_size,
                             const std::string& path, const TensorInfo& tensor, uint64_t offset,
                             uint64_t size) {
  uint64_t last = 0;
  if (tensor.begin > tensor.end || tensor.end > file_size - header.data_start) {
    throw Error(ErrorKind::kInvalidArgument, "tensor does not belong to this file",
                {.file = path,
                 .tensor = tensor.name,
                 .field = "data_offsets",
                 .expected = fmt::format("within [0, {}]", file_size - header.data_start),
                 .found = fmt::format("[{}, {}]", tensor.begin, tensor.end)});
  }
  if (__builtin_add_overflow(offset, size, &last) || last > tensor.nbytes()) {
    throw Error(ErrorKind::kInvalidArgument, "range is outside the tensor",
                {.file = path,
                 .tensor = tensor.name,
                 .expected = fmt::format("within {} bytes", tensor.nbytes()),
                 .found = fmt::format("{} bytes at offset {}", size, offset)});
  }
  return header.data_start + tensor.begin + offset;
}

}  // namespace

void SafetensorsFile::read(const TensorInfo& tensor, uint64_t offset,
                           std::span<std::byte> dst) const {
  const uint64_t at = checked_file_offset(header_, file_size_, path_, tensor, offset, dst.size());
  if (dst.empty()) return;
  if (map_ != nullptr) {
    std::memcpy(dst.data(), map_ + at, dst.size());
    return;
  }
  format::pread_exact(fd_, dst, at, {.file = path_, .tensor = tensor.name});
}

TensorView SafetensorsFile::view(const TensorInfo& tensor) const {
  if (map_ == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, "zero-copy views need the mmap back end",
                {.file = path_, .tensor = tensor.name});
  }
  const uint64_t at = checked_file_offset(header_, file_size_, path_, tensor, 0, tensor.nbytes());
  return TensorView{
      .dtype = tensor.dtype, .shape = tensor.shape, .data = {map_ + at, tensor.nbytes()}};
}

}  // namespace shardload
