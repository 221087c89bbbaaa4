#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace shardload {

// The file inside a staging directory that its export holds a lock (flock) on while it runs.
inline constexpr const char* kStagingLockName = ".shardload-staging.lock";

// Removes the staging directories that exports to `dest` (already resolved) left when their process
// died: DIR/.NAME.shardload-tmp-XXXXXXXX beside it, and DEST/.shardload-tmp-XXXXXXXX inside a
// mount-point DEST. One is removed only when it is a directory of this user (not a link), holds
// the lock file, its lock can be taken (the kernel dropped it with its holder) and it holds nothing
// but files. The others stay: `note` is told of each, and of each removal with the bytes freed.
// Old exports moved aside by an interrupted --overwrite (DIR/.NAME.shardload-old-XXXXXXXX) hold
// the only copy of that export: they are told of, never removed. Never throws.
void remove_dead_staging(const std::filesystem::path& dest,
                         const std::function<void(const std::string&)>& note);

}  // namespace shardload
