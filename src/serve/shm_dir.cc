#include "serve/shm_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "serve/errno_error.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {
namespace {

constexpr mode_t kPrivateDirMode = 0700;
constexpr mode_t kGroupDirMode = 0750;
constexpr mode_t kPrivateFileMode = 0600;
constexpr mode_t kGroupFileMode = 0640;

// "uid 65534 (nobody)": the number always, the name when the system knows it.
std::string describe_user(uid_t uid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

// The group's id, by name or number; unknown groups are a usage error.
gid_t resolve_group(const std::string& group) {
  struct group entry {};
  struct group* found = nullptr;
  std::vector<char> buffer(16384);
  if (getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found) == 0 &&
      found != nullptr) {
    return found->gr_gid;
  }
  gid_t gid = 0;
  const auto [end, ec] = std::from_chars(group.data(), group.data() + group.size(), gid);
  if (!group.empty() && ec == std::errc() && end == group.data() + group.size()) return gid;
  throw Error(ErrorKind::kInvalidArgument, "unknown group",
              {.field = "--shm-group", .expected = "a group name or id", .found = group});
}

// Why the directory open as `fd` is not one this server may use, or empty.
std::string refusal(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != geteuid()) return "is owned by another user";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "is writable by group or others";
  return {};
}

Error refused(const std::string& path, const std::string& why, const struct stat& st) {
  return Error(
      ErrorKind::kIo,
      fmt::format("refusing to use {}: it {} (remove it, or pick another --name)", path, why),
      {.file = path,
       .field = "owner and mode",
       .expected = fmt::format("a directory owned by {}, not writable by group or others",
                               describe_user(geteuid())),
       .found =
           fmt::format("owner {}, mode {:04o}", describe_user(st.st_uid), st.st_mode & 07777)});
}

// Opens `path` as a directory without following a final symbolic link, with a clear error when
// it is one.
int open_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int open_errno = errno;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    throw Error(ErrorKind::kIo,
                fmt::format("refusing to use {}: it is a symbolic link (remove it, or pick another "
                            "--name)",
                            path),
                {.file = path,
                 .field = "file type",
                 .expected = "a directory",
                 .found = fmt::format("a symbolic link owned by {}", describe_user(st.st_uid))});
  }
  if (::lstat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw refused(path, "is not a directory", st);
  errno = open_errno;
  throw errno_error("open", path);
}

}  // namespace

ShmDir ShmDir::open(const std::string& path, const std::string& group) {
  ShmDir dir;
  dir.path_ = path;
  if (!group.empty()) dir.group_ = resolve_group(group);
  // Created private: no one else can add a file between mkdir and the mode set below.
  if (::mkdir(path.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) throw errno_error("mkdir", path);
  dir.fd_ = open_directory(path);
  struct stat st {};
  if (::fstat(dir.fd_, &st) != 0) throw errno_error("stat", path);
  const std::string why = refusal(st);
  if (!why.empty()) throw refused(path, why, st);
  return dir;
}

void ShmDir::apply_access() const {
  if (group_ && ::fchown(fd_, static_cast<uid_t>(-1), *group_) != 0) {
    throw errno_error(fmt::format("giving the directory to group {}", *group_), path_);
  }
  if (::fchmod(fd_, group_ ? kGroupDirMode : kPrivateDirMode) != 0) throw errno_error("chmod", path_);
}

ShmDir::~ShmDir() {
  if (fd_ >= 0) ::close(fd_);
}

ShmDir::ShmDir(ShmDir&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), group_(other.group_) {}

ShmDir& ShmDir::operator=(ShmDir&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    group_ = other.group_;
  }
  return *this;
}

int ShmDir::open_own_file(const std::string& name, int flags, std::string* why) const {
  const int fd = ::openat(fd_, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP
               ? fmt::format("{} is a symbolic link", file_path(name))
               : fmt::format("{} cannot be opened ({})", file_path(name), std::strerror(errno));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
    *why = fmt::format("{} is not a regular file with one link owned by {}", file_path(name),
                       describe_user(geteuid()));
    ::close(fd);
    return -1;
  }
  return fd;
}

int ShmDir::create_file(const std::string& name, bool replace) const {
  if (replace) unlink(name);
  const int fd = ::openat(fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          group_ ? kGroupFileMode : kPrivateFileMode);
  if (fd < 0) {
    if (errno == EEXIST && !replace) return -1;
    throw errno_error("create", file_path(name));
  }
  try {
    apply_file_access(fd, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

void ShmDir::apply_file_access(int fd, const std::string& name) const {
  if (group_ && ::fchown(fd, static_cast<uid_t>(-1), *group_) != 0) {
    throw errno_error("chown", file_path(name));
  }
  if (::fchmod(fd, group_ ? kGroupFileMode : kPrivateFileMode) != 0) {
    throw errno_error("chmod", file_path(name));
  }
}

int ShmDir::lock_server(std::chrono::milliseconds wait) const {
  const std::string name(kShmServerLockName);
  const int fd = ::openat(fd_, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0) throw errno_error("create the server lock", file_path(name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 ||
      ::fchmod(fd, kPrivateFileMode) != 0) {
    ::close(fd);
    throw Error(ErrorKind::kIo, "the server lock is not a regular file of this user",
                {.file = file_path(name)});
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const Error error = errno_error("flock", file_path(name));
      ::close(fd);
      throw error;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fd;
}

int ShmDir::mark_alive() const {
  const std::string name(kShmServerAliveName);
  const int fd = ::openat(fd_, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0) throw errno_error("create", file_path(name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
    ::close(fd);
    throw Error(ErrorKind::kIo, "not a regular file of this user", {.file = file_path(name)});
  }
  try {
    apply_file_access(fd, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  struct flock shared {};
  shared.l_type = F_RDLCK;
  shared.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &shared) != 0) {
    const Error error = errno_error("fcntl(F_OFD_SETLK)", file_path(name));
    ::close(fd);
    throw error;
  }
  return fd;
}

void ShmDir::unlink(const std::string& name) const {
  if (::unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
    throw errno_error("unlink", file_path(name));
  }
}

std::vector<std::string> ShmDir::names() const {
  std::vector<std::string> out;
  // A listing of its own: the descriptor held here keeps no read position.
  const int list_fd = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list_fd < 0) return out;
  DIR* listing = ::fdopendir(list_fd);
  if (listing == nullptr) {
    ::close(list_fd);
    return out;
  }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(listing);
  return out;
}

void ShmDir::remove_all() const {
  if (fd_ < 0) return;
  // unlinkat removes a link itself, never its target; a subdirectory (no server makes one) stays.
  for (const std::string& name : names()) ::unlinkat(fd_, name.c_str(), 0);
  // The directory goes only if its name still names the directory held open here.
  const std::filesystem::path path(path_);
  const int parent = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return;
  struct stat held {};
  struct stat named {};
  if (::fstat(fd_, &held) == 0 &&
      ::fstatat(parent, path.filename().c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
      held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
    ::unlinkat(parent, path.filename().c_str(), AT_REMOVEDIR);
  }
  ::close(parent);
}

}  // namespace shardload::serve

namespace shardload {

bool is_known_group(const std::string& group) {
  try {
    serve::resolve_group(group);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace shardload
