#pragma once

#include <filesystem>
#include <string>

namespace shardload {

// A directory made beside an export's destination and moved into place once everything in it is
// written, so that the destination only ever holds a complete export (or what it held before).
// Until commit() the directory is removed with its contents when this object goes away (an
// exception on the way out included).
class StagingDir {
 public:
  // Creates DIR/.NAME.shardload-tmp-XXXXXXXX for the destination DIR/NAME (`dest` already
  // resolved), creating DIR if it is missing. Throws Error(kIo).
  explicit StagingDir(std::filesystem::path dest);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Moves the staged directory to the destination. A missing or empty destination is replaced at
  // once. With `replace`, a non-empty one is swapped out whole, then the entries `keep_old` accepts
  // that the new one does not have are moved into the new one, and the rest of the old one is
  // removed. Throws Error(kIo), leaving the destination as it was when the swap itself fails.
  void commit(bool replace, bool (*keep_old)(const std::string& name));

 private:
  std::filesystem::path dest_;
  std::filesystem::path path_;
  bool committed_ = false;
};

}  // namespace shardload
