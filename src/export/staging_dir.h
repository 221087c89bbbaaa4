#pragma once

#include <filesystem>
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
class StagingDir {
 public:
  // `dest` already resolved. Creates DIR if it is missing. Throws Error(kIo).
  StagingDir(std::filesystem::path dest, std::string manifest);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Moves the staged export to the destination. A missing or empty destination is replaced at once.
  // With `replace`, a non-empty one is swapped out whole, then the entries `keep_old` accepts that
  // the new one does not have are moved into the new one, and the rest of the old one is removed.
  // Throws Error(kIo) (Error(kInvalidArgument) for a non-empty destination without `replace`),
  // leaving the destination as it was when the swap itself fails.
  void commit(bool replace, bool (*keep_old)(const std::string& name));

 private:
  void commit_in_place(bool replace, bool (*keep_old)(const std::string& name));

  std::filesystem::path dest_;
  std::string manifest_;
  std::filesystem::path path_;
  bool in_place_ = false;  // made inside a mount-point destination
  bool committed_ = false;
};

}  // namespace shardload
