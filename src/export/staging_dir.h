#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace shardload {

// A directory an export is written into and moved into place from once complete, so that the
// destination only ever holds a complete export (or what it held before). Until commit() the
// directory is removed with its contents when this object goes away (an exception included).
//
// It is made beside the destination, DIR/.NAME.shardload-tmp-XXXXXXXX, and renamed to DIR/NAME.
// A destination that is a mount point (a volume given as --out) cannot be renamed over: the
// directory is then made inside it, and commit() moves its entries up one by one with the manifest
// last, so that what is there before the manifest does not look like an export.
//
// The process holds a lock (flock) on DIR/.NAME.shardload-tmp-XXXXXXXX/.shardload-staging.lock for
// the export's life; the kernel drops it when the process dies, SIGKILL included. So a staging
// directory whose lock can be taken was left by a process that is gone: the next export to the
// same destination removes it (hundreds of GB for a real model) and tells `note` so; one still
// locked belongs to a running export and stays, as does anything it cannot prove is an abandoned
// staging directory (also told).
class StagingDir {
 public:
  using Note = std::function<void(const std::string&)>;

  // `dest` already resolved. Creates DIR if it is missing. Throws Error(kIo).
  StagingDir(std::filesystem::path dest, std::string manifest, const Note& note = {});
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Makes the entries written into the directory so far durable (fsync of the directory): before
  // the manifest is written, so that a power cut never leaves a manifest naming files that are not
  // there. Throws Error(kIo).
  void sync() const;

  // Moves the staged export to the destination. A missing or empty destination is replaced at once.
  // With `replace`, a non-empty one is swapped out whole, then the entries `keep_old` accepts that
  // the new one does not have are moved into the new one, and the rest of the old one is removed.
  // Throws Error(kIo) (Error(kInvalidArgument) for a non-empty destination without `replace`),
  // leaving the destination as it was when the swap itself fails.
  void commit(bool replace, bool (*keep_old)(const std::string& name));

 private:
  void commit_in_place(bool replace, bool (*keep_old)(const std::string& name));
  // Removes the lock file and syncs the directory, just before it is moved into place.
  void release_lock();

  std::filesystem::path dest_;
  std::string manifest_;
  std::filesystem::path path_;
  bool in_place_ = false;  // made inside a mount-point destination
  bool committed_ = false;
  int lock_fd_ = -1;  // the lock file, flock'ed while this object lives
};

// fsync of a file or directory. Throws Error(kIo).
void sync_path(const std::filesystem::path& path);

}  // namespace shardload
