#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace shardload::serve {

// The shared-memory directory, held open. /dev/shm is writable by every user, so a path there can
// name a directory, file or symbolic link someone else made: every check is made on the open
// descriptor and every file is opened, created and removed relative to it without following links,
// so a name swapped after the checks never redirects a write. Move-only; closes the descriptor.
class ShmDir {
 public:
  // Creates `path` with mode 0700 or adopts it when this user owns it, it is a real directory and
  // no one else may write to it. Anything else (a symbolic link, another owner, a mode that lets
  // group or others write) is refused with an Error naming the path, and left as it is. `group`
  // (a name or id; empty: none) is resolved now and applied by apply_access.
  static ShmDir open(const std::string& path, const std::string& group);
  // Sets the directory's mode explicitly, whatever the umask or an earlier server left: 0700, or
  // 0750 owned by the group. Called once the directory is locked, so that a server refused by the
  // lock never changes the one in use. Throws Error(kIo).
  void apply_access() const;

  ShmDir() = default;
  ~ShmDir();
  ShmDir(ShmDir&& other) noexcept;
  ShmDir& operator=(ShmDir&& other) noexcept;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  std::string file_path(const std::string& name) const { return path_ + "/" + name; }

  // Opens NAME with `flags` (O_NOFOLLOW and O_CLOEXEC added) only if it is a regular file with one
  // link owned by this user, i.e. one a server of this user created; -1 and the reason in `why`
  // otherwise (absent included).
  int open_own_file(const std::string& name, int flags, std::string* why) const;
  // A new, empty, read-write file NAME (O_EXCL, never through a link) with the mode and group of
  // this directory's files. With `replace`, an entry of that name is unlinked first; without, an
  // existing one fails with errno EEXIST and -1 is returned. Throws Error(kIo) on other failures.
  int create_file(const std::string& name, bool replace) const;
  // Sets the mode (0600, or 0640 with the group) of a file of this directory explicitly, whatever
  // the umask or an earlier server left. Throws Error(kIo).
  void apply_file_access(int fd, const std::string& name) const;
  // Takes the server's lock (kShmServerLockName, created 0600 and owned by this user, never
  // through a link) and returns its descriptor, or -1 when another process still holds it after
  // `wait` (a server starting or stopping beside this one: a short wait, not a refusal). Throws
  // Error(kIo) when the file cannot be made or is not this user's own.
  int lock_server(std::chrono::milliseconds wait) const;
  // Marks the directory as held by a running server (kShmServerAliveName, with the mode of the
  // directory's files, a shared F_OFD_SETLK lock held on it) and returns the descriptor to keep.
  // Throws Error(kIo).
  int mark_alive() const;
  // Unlinks NAME (not what it may point to); an absent one is fine. Throws Error(kIo).
  void unlink(const std::string& name) const;
  // The names of the directory's entries ("." and ".." left out).
  std::vector<std::string> names() const;
  // Removes every file of the directory, then the directory itself, following no link; best
  // effort (what cannot be removed stays).
  void remove_all() const;

 private:
  int fd_ = -1;
  std::string path_;
  std::optional<gid_t> group_;
};

}  // namespace shardload::serve
