#include "export/staging_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "export/stale_staging.h"
#include "format/posix_io.h"
#include "shardload/error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

Error io_error(const std::string& what, const fs::path& path, int error) {
  return Error(ErrorKind::kIo, fmt::format("{}: {}", what, std::strerror(error)),
               {.file = path.string()});
}

// A new directory PARENT/NAME-XXXXXXXX made by this process (mkdir fails on any name that exists,
// a symlink included, so nothing found there is ever used), with the mode a plain mkdir gives.
fs::path make_unique_dir(const fs::path& parent, const std::string& name, mode_t mode) {
  std::random_device random;
  for (int attempt = 0; attempt < format::kTempNameAttempts; ++attempt) {
    const fs::path path = parent / fmt::format("{}-{:08x}", name, random());
    if (::mkdir(path.c_str(), mode) == 0) return path;
    if (errno != EEXIST) throw io_error("cannot create a directory for the export", path, errno);
  }
  throw Error(ErrorKind::kIo, "cannot find a free name for a directory", {.file = parent.string()});
}

fs::path make_sibling(const fs::path& dest, const char* kind, mode_t mode) {
  return make_unique_dir(dest.parent_path(),
                         fmt::format(".{}.shardload-{}", dest.filename().string(), kind), mode);
}

// The names in a directory, read before any of them is moved or removed.
std::vector<std::string> entry_names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    out.push_back(entry.path().filename().string());
  }
  return out;
}

// Whether an existing directory is a mount point: renaming onto it fails (EBUSY).
bool is_mount_point(const fs::path& dir) {
  struct stat self, parent;
  if (::lstat(dir.c_str(), &self) != 0 || !S_ISDIR(self.st_mode)) return false;
  if (::stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

bool is_empty_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_empty(path, ec) && !ec;
}

// The lock file of a new staging directory, locked before it appears under its name: an export
// cleaning up (stale_staging.cc) takes a lock file it can lock for its dead holder's. Returns its
// descriptor, whose lock lasts until it is closed or the process dies.
int lock_staging(const fs::path& dir) {
  const fs::path fresh = dir / (std::string(kStagingLockName) + ".new");
  const int fd = ::open(fresh.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw io_error("cannot create the export's lock file", fresh, errno);
  if (::flock(fd, LOCK_EX) != 0 || ::rename(fresh.c_str(), (dir / kStagingLockName).c_str()) != 0) {
    const int error = errno;
    ::close(fd);
    throw io_error("cannot lock the directory of the export", dir, error);
  }
  return fd;
}

}  // namespace

void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("cannot open to sync", path, errno);
  const int failed = ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (failed != 0) throw io_error("cannot sync", path, failed);
}

void StagingDir::sync() const { sync_path(path_); }

StagingDir::StagingDir(fs::path dest, std::string manifest, const Note& note)
    : dest_(std::move(dest)), manifest_(std::move(manifest)) {
  std::error_code ec;
  fs::create_directories(dest_.parent_path(), ec);
  if (ec) {
    throw Error(ErrorKind::kIo,
                fmt::format("cannot create the output's parent directory: {}", ec.message()),
                {.file = dest_.parent_path().string()});
  }
  // The mode a plain mkdir of the destination would give (0777 less the umask), set by mkdir
  // itself.
  in_place_ = is_mount_point(dest_);
  remove_dead_staging(dest_, note);
  path_ =
      in_place_ ? make_unique_dir(dest_, ".shardload-tmp", 0777) : make_sibling(dest_, "tmp", 0777);
  try {
    lock_fd_ = lock_staging(path_);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(path_, ec);
    throw;
  }
}

StagingDir::~StagingDir() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(path_,
                   ec);  // does not follow symlinks; everything in it was written by this process
  }
  ::close(lock_fd_);  // the lock goes last: until the directory is gone, nobody else removes it
}

void StagingDir::release_lock() {
  // The lock file goes (its lock kept until the descriptor closes) before the directory becomes
  // the export: an export is never taken for an abandoned staging directory.
  const fs::path lock = path_ / kStagingLockName;
  if (::unlink(lock.c_str()) != 0 && errno != ENOENT) throw io_error("cannot remove", lock, errno);
  sync();
}

void StagingDir::commit(bool replace, bool (*keep_old)(const std::string& name)) {
  if (in_place_) return commit_in_place(replace, keep_old);
  struct stat old;
  if (::lstat(dest_.c_str(), &old) != 0) {
    if (errno != ENOENT) throw io_error("cannot stat the output directory", dest_, errno);
    release_lock();
    if (::rename(path_.c_str(), dest_.c_str()) != 0)
      throw io_error("cannot move the export into place", dest_, errno);
    committed_ = true;
    sync_path(dest_.parent_path());  // the rename itself
    return;
  }
  if (!S_ISDIR(old.st_mode)) {
    throw Error(ErrorKind::kIo, "the output path is not a directory", {.file = dest_.string()});
  }
  // The replacement keeps the old directory's permissions (it may have been made private on
  // purpose).
  if (::chmod(path_.c_str(), old.st_mode & 07777) != 0)
    throw io_error("cannot set the mode", path_, errno);
  if (is_empty_dir(dest_)) {  // rename replaces an empty directory in one step
    release_lock();
    if (::rename(path_.c_str(), dest_.c_str()) != 0)
      throw io_error("cannot move the export into place", dest_, errno);
    committed_ = true;
    sync_path(dest_.parent_path());
    return;
  }
  if (!replace) {
    throw Error(ErrorKind::kInvalidArgument, "the output directory is not empty (use --overwrite)",
                {.file = dest_.string(), .field = "--out"});
  }
  release_lock();
  // One atomic exchange where the file system has it, else two renames with the old one parked
  // beside.
  fs::path retired = path_;
  if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS)
      throw io_error("cannot move the export into place", dest_, errno);
    retired = make_sibling(dest_, "old", 0700);
    if (::rename(dest_.c_str(), retired.c_str()) != 0) {
      const int error = errno;
      ::rmdir(retired.c_str());
      throw io_error("cannot move the old output directory aside", dest_, error);
    }
    if (::rename(path_.c_str(), dest_.c_str()) != 0) {
      const int error = errno;
      ::rename(retired.c_str(), dest_.c_str());  // put the old one back
      throw io_error("cannot move the export into place", dest_, error);
    }
  }
  committed_ = true;
  sync_path(dest_.parent_path());
  // The new export is in place. What the old directory held beside its export (files a user put
  // there) moves over; a failure here loses nothing: the old directory then stays where it is, and
  // the error says where.
  for (const fs::directory_entry& entry : fs::directory_iterator(retired)) {
    const std::string name = entry.path().filename().string();
    if (!keep_old(name)) continue;
    const fs::path target = dest_ / name;
    struct stat existing;
    if (::lstat(target.c_str(), &existing) == 0) continue;  // the new export's own file wins
    if (::rename(entry.path().c_str(), target.c_str()) != 0) {
      throw Error(
          ErrorKind::kIo,
          fmt::format(
              "the export is in place, but the old directory's other files could not be moved "
              "into it: {}; they are in {}",
              std::strerror(errno), retired.string()),
          {.file = dest_.string()});
    }
  }
  std::error_code ec;
  fs::remove_all(retired, ec);
}

void StagingDir::commit_in_place(bool replace, bool (*keep_old)(const std::string& name)) {
  const std::string staging = path_.filename().string();
  const std::vector<std::string> old = entry_names(dest_);
  const bool empty = old.size() == 1;  // the staging directory alone
  if (!empty && !replace) {
    throw Error(ErrorKind::kInvalidArgument, "the output directory is not empty (use --overwrite)",
                {.file = dest_.string(), .field = "--out"});
  }
  // The old manifest goes first: from here until the new one arrives, the directory is no export.
  const fs::path manifest = dest_ / manifest_;
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) {
    throw io_error("cannot remove the old manifest", manifest, errno);
  }
  for (const std::string& name : entry_names(dest_)) {
    if (name == staging || keep_old(name)) continue;
    if (::unlink((dest_ / name).c_str()) != 0) {
      throw io_error("cannot remove a file of the old export", dest_ / name, errno);
    }
  }
  release_lock();
  for (const std::string& name : entry_names(path_)) {
    if (name == manifest_) continue;
    if (::rename((path_ / name).c_str(), (dest_ / name).c_str()) != 0) {
      throw io_error("cannot move a file of the export into place", dest_ / name, errno);
    }
  }
  sync_path(dest_);  // the rank files are in place before the manifest is
  if (::rename((path_ / manifest_).c_str(), manifest.c_str()) != 0) {
    throw io_error("cannot move the manifest into place", manifest, errno);
  }
  committed_ = true;
  ::rmdir(path_.c_str());
  sync_path(dest_);
}

}  // namespace shardload
