#pragma once

#include <string>
#include <vector>

#include "serve/shm_rank_file.h"
#include "shardload/checkpoint.h"
#include "shardload/reload.h"
#include "shardload/serve.h"

namespace shardload::serve {

// The served model in shared memory: the locked directory shm_dir(NAME), one mapped file per rank
// whose tensor area is the live rank buffer, and the manifest kept in step with the live model.
class ShmStore {
 public:
  // Locks the directory (a second server on the same NAME is refused), then reuses what it holds
  // when the manifest matches and every sequence word is even, or loads the checkpoint into it. A
  // failed start removes the directory unless options.keep. Throws Error.
  explicit ShmStore(const ServeOptions& options);
  ~ShmStore();
  ShmStore(const ShmStore&) = delete;
  ShmStore& operator=(const ShmStore&) = delete;

  LiveModel& live() { return live_; }
  const LiveModel& live() const { return live_; }
  const std::string& dir() const { return dir_; }
  const std::string& note() const { return note_; }
  bool reused() const { return reused_; }

  // Update options whose begin/end hooks move every rank's sequence word (odd during each commit
  // group).
  UpdateOptions update_options();
  // Rewrites the manifest from the live model. Throws Error(kIo).
  void write_manifest(bool update_in_progress) const;
  // Deletes the directory and its files (the mappings here stay valid until destruction).
  void remove() const;

 private:
  void open_or_load(const ServeOptions& options);
  void load(const Checkpoint& checkpoint, Plan plan, const std::string& model_path);

  std::string name_;
  std::string dir_;
  int lock_fd_ = -1;
  std::string note_;
  bool reused_ = false;
  int threads_ = 0;
  uint64_t staging_bytes_ = 0;
  std::vector<ShmRankFile> files_;
  LiveModel live_;
};

}  // namespace shardload::serve
