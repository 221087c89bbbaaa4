#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "format/header_writer.h"
#include "format/length_prefix.h"
#include "format/posix_io.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {

namespace {

constexpr size_t kStagingBytes = 1 << 20;

// A sibling of the target, so that the final rename stays within one file system and is atomic.
// Hidden, and not ending in .safetensors, so that a directory scan never takes a half-written file
// for a shard.
std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  const std::filesystem::path target(path);
  const std::string name = fmt::format(".{}.tmp.{}.{}.{:x}", target.filename().string(), ::getpid(),
                                       counter.fetch_add(1), salt);
  return (target.parent_path() / name).string();
}

// Removes the temporary file unless the rename went through, and closes it in any case.
class TempFile {
 public:
  explicit TempFile(const std::string& target) {
    for (int attempt = 0; fd_ < 0; ++attempt) {
      path_ = temp_path_for(target);
      // 0666 and the umask give the permissions a plain create would; mkstemp would force 0600.
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt + 1 == format::kTempNameAttempts)) {
        throw format::io_error("cannot create temporary file " + path_, errno, {.file = target});
      }
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }

  void commit(const std::string& target) {
    const ErrorDetails where{.file = target};
    // Flushed before the rename: otherwise a crash can leave an empty file under the final name.
    if (::fdatasync(fd_) != 0) throw format::io_error("cannot sync " + path_, errno, where);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw format::io_error("cannot close " + path_, errno, where);
    if (::rename(path_.c_str(), target.c_str()) != 0) {
      throw format::io_error("cannot rename " + path_, errno, where);
    }
    committed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Gathers small pieces into few large writes; large tensors go straight from the caller's memory.
class StagedWriter {
 public:
  StagedWriter(int fd, const std::string& file) : fd_(fd), where_{.file = file} {
    staging_.reserve(kStagingBytes);
  }

  void write(std::span<const std::byte> bytes) {
    if (staging_.size() + bytes.size() <= kStagingBytes) {
      staging_.insert(staging_.end(), bytes.begin(), bytes.end());
      return;
    }
    flush();
    if (bytes.size() >= kStagingBytes) {
      format::write_exact(fd_, bytes, where_);
    } else {
      staging_.assign(bytes.begin(), bytes.end());
    }
  }

  void flush() {
    format::write_exact(fd_, staging_, where_);
    staging_.clear();
  }

 private:
  int fd_;
  ErrorDetails where_;
  std::vector<std::byte> staging_;
};

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  format::WriteLayout layout;
  try {
    layout = format::layout_safetensors(tensors, metadata);
  } catch (const Error& error) {
    throw error.with_file(path);
  }
  TempFile temp(path);
  StagedWriter out(temp.fd(), path);
  out.write(format::store_length(layout.header.size()));
  out.write(std::as_bytes(std::span(layout.header)));
  for (size_t position : layout.order) out.write(tensors[position].data);
  out.flush();
  temp.commit(path);
}

void write_sparse_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  format::WriteLayout layout;
  try {
    layout = format::layout_safetensors(tensors, metadata, /*sparse=*/true);
  } catch (const Error& error) {
    throw error.with_file(path);
  }
  const uint64_t size = format::kLengthBytes + layout.header.size() + layout.data_bytes;
  if (size < layout.data_bytes || size > static_cast<uint64_t>(INT64_MAX)) {
    throw Error(ErrorKind::kInvalidArgument, "file size past the largest file offset",
                {.file = path, .found = fmt::format("{} data bytes", layout.data_bytes)});
  }
  TempFile temp(path);
  StagedWriter out(temp.fd(), path);
  out.write(format::store_length(layout.header.size()));
  out.write(std::as_bytes(std::span(layout.header)));
  out.flush();
  // Extending the file writes nothing: the data section is a hole, which reads as zeros.
  if (::ftruncate(temp.fd(), static_cast<off_t>(size)) != 0) {
    throw format::io_error("cannot extend", errno, {.file = path});
  }
  temp.commit(path);
}

}  // namespace shardload
