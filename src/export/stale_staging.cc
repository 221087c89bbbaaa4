// Finding and removing what exports killed part-way left beside their destination. The only proof
// that an export is gone is its lock: flock locks belong to open files, and the kernel releases
// them when the last descriptor closes, which a SIGKILL or a crash does too.
#include "export/stale_staging.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/admission.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

using Note = std::function<void(const std::string&)>;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// PREFIX followed by the 8 hex digits make_unique_dir gives (staging_dir.cc).
bool has_staging_name(const std::string& name, const std::string& prefix) {
  if (name.size() != prefix.size() + 8 || !name.starts_with(prefix)) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path().filename().string());
  }
  return out;
}

std::string left(const fs::path& path, const std::string& why) {
  return fmt::format("left {}: {}", path.string(), why);
}

// Removes PARENT/NAME when it is an abandoned staging directory (see the header); returns what to
// tell, empty for nothing (it went away, or its export just committed it).
std::string remove_if_abandoned(int parent_fd, const fs::path& parent, const std::string& name) {
  const fs::path path = parent / name;
  struct stat found;
  if (::fstatat(parent_fd, name.c_str(), &found, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (!S_ISDIR(found.st_mode) || found.st_uid != ::geteuid()) {
    return left(path, "not a directory of this user");
  }
  const Fd dir(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.ok()) return left(path, std::strerror(errno));
  const Fd lock(::openat(dir.get(), kStagingLockName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!lock.ok()) {
    return left(path,
                "it holds no lock file, so nothing tells whether an export still uses it (an "
                "export starting or finishing, an interrupted --overwrite's old files, or an older "
                "shardload's leftover); remove it by hand if no export to this --out is running");
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return left(path, errno == EWOULDBLOCK ? "an export that is still running holds its lock"
                                           : std::strerror(errno));
  }
  // The lock is ours, so its holder is gone, unless it committed meanwhile: an export unlinks the
  // lock file (while holding it) before its directory becomes the export. Still linked, in the
  // directory still at this name: a leftover.
  struct stat lock_now, linked, dir_now, named;
  if (::fstat(lock.get(), &lock_now) != 0 ||
      ::fstatat(dir.get(), kStagingLockName, &linked, AT_SYMLINK_NOFOLLOW) != 0 ||
      !same_file(lock_now, linked) || ::fstat(dir.get(), &dir_now) != 0 ||
      ::fstatat(parent_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      !same_file(dir_now, named)) {
    return "";
  }
  // An export writes files only: anything else was put there by someone else, and stays.
  std::vector<std::string> entries;
  uint64_t bytes = 0;
  for (const std::string& entry : names_in(path)) {
    struct stat st;
    if (::fstatat(dir.get(), entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) return left(path, fmt::format("it holds a directory, {}", entry));
    entries.push_back(entry);
    bytes += static_cast<uint64_t>(st.st_size);
  }
  for (const std::string& entry : entries) {
    // unlinkat removes a link itself, never what it points to.
    if (::unlinkat(dir.get(), entry.c_str(), 0) != 0 && errno != ENOENT) {
      return left(path, fmt::format("cannot remove {}: {}", entry, std::strerror(errno)));
    }
  }
  if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0) {
    return left(path, fmt::format("cannot remove it: {}", std::strerror(errno)));
  }
  return fmt::format("removed {}, left by an export whose process is gone: {} freed",
                     path.string(), bytes_text(bytes));
}

void scan(const fs::path& dir, const std::string& staging_prefix, const std::string& old_prefix,
          const Note& note) {
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd.ok()) return;
  for (const std::string& name : names_in(dir)) {
    std::string told;
    if (has_staging_name(name, staging_prefix)) {
      told = remove_if_abandoned(dir_fd.get(), dir, name);
    } else if (!old_prefix.empty() && has_staging_name(name, old_prefix)) {
      told = left(dir / name,
                  "an --overwrite that was interrupted moved the earlier export there; remove it "
                  "by hand once the output directory holds what it should");
    }
    if (!told.empty() && note) note(told);
  }
}

}  // namespace

void remove_dead_staging(const fs::path& dest, const Note& note) {
  try {
    const std::string name = dest.filename().string();
    scan(dest.parent_path(), fmt::format(".{}.shardload-tmp-", name),
         fmt::format(".{}.shardload-old-", name), note);
    scan(dest, ".shardload-tmp-", "", note);  // a mount point as --out is staged inside
  } catch (...) {
    // What is left behind costs disk space, never the export: it must not fail the export.
  }
}

}  // namespace shardload
