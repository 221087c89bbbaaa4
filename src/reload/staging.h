#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/reload.h"

namespace shardload::reload {

// A byte range of a rank buffer that an update rewrites.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The unit of an update: one module of one rank (index into LiveModel::ranks), with the live ranges
// it rewrites. Units are what a bounded staging area groups; each group commits atomically.
struct Unit {
  size_t rank_index = 0;
  uint32_t module = 0;
  std::vector<ByteRange> ranges;
  uint64_t bytes = 0;    // sum of ranges
  uint64_t tensors = 0;  // exported rank tensors rewritten
  // An expert-filtered update of a routed-expert module: the slots it rewrites (ascending); empty:
  // the whole module.
  std::vector<uint64_t> slots{};
};

void add_range(Unit& unit, uint64_t offset, uint64_t bytes);

// Splits units into groups of at most `bound` staged bytes (0: one group). Units with the same
// `together` id (one per unit; empty: every unit on its own) go into the same group: a rebalance
// copying a slot from another rank must stage it before that rank's own commit rewrites it. Throws
// Error(kInvalidArgument) before anything is read when a unit, or units that must stay together,
// are larger than the bound.
std::vector<std::vector<size_t>> group_units(const std::vector<Unit>& units, uint64_t bound,
                                             const Plan& plan,
                                             const std::vector<RankWeights>& ranks,
                                             const std::vector<size_t>& together = {});

// A mirror of every live rank buffer at the same offsets, so that the loader and post-processing
// run on it unchanged. Its pages are untouched until written (anonymous memory), so it costs what
// is staged.
class Staging {
 public:
  // Reuses live.kept_staging when it fits the ranks (its buffers move in); with double buffering
  // (live.spare) the spare buffers move in instead, brought up to date by sync_spare first.
  explicit Staging(LiveModel& live);
  std::vector<RankWeights>& ranks() { return ranks_; }
  // Position of rank id `rank` in ranks() (and in LiveModel::ranks).
  size_t index_of(int rank) const { return index_of_[static_cast<size_t>(rank)]; }
  // Hands the buffers back to live.kept_staging for the next update.
  void keep(LiveModel& live);
  // Hands the buffers back to live.spare (double buffering), after swap_commit or a failure.
  void return_spare(LiveModel& live);
  // Gives back the pages of the units' ranges (between commit groups of a bounded update).
  void release(const std::vector<Unit>& units, const std::vector<size_t>& group);

 private:
  std::vector<RankWeights> ranks_;
  std::vector<size_t> index_of_;
};

// Copies the group's ranges from staging into the live buffers with `threads` threads, between the
// begin_commit and end_commit hooks. Returns the seconds the commit took (the pause readers see).
double commit_group(LiveModel& live, Staging& staging, const std::vector<Unit>& units,
                    const std::vector<size_t>& group, const UpdateOptions& options);

// Double buffering (LiveModel::spare). Copies from the live buffers into the spare the stale ranges
// that no unit rewrites, with `threads` threads, so that the spare is whole once the units are staged
// into it; returns the bytes copied.
uint64_t sync_spare(LiveModel& live, const std::vector<Unit>& units, int threads);
// The commit of a double-buffered change: between the begin_commit and end_commit hooks, each live
// buffer and its staged spare (staging.ranks()) change places. Returns the seconds it took.
double swap_commit(LiveModel& live, Staging& staging, const UpdateOptions& options);
// The spare's stale ranges after a change: the units' ranges, and (`failed`: the spare may hold a part
// of the units and still lacks what it lacked) those it had before too.
void mark_stale(LiveModel& live, const std::vector<Unit>& units, bool failed);

// The identity of every file of a checkpoint when staging starts; check() throws Error(kConflict)
// naming the file when one was modified, truncated or replaced since (its bytes may be a mix of old
// and new).
class FileWatch {
 public:
  explicit FileWatch(const Checkpoint& checkpoint);
  void check() const;

 private:
  struct Identity {
    std::string path;
    int fd;
    dev_t dev;
    ino_t ino;
    off_t size;
    timespec mtime;
  };
  std::vector<Identity> files_;
};

// Throws Error(kConflict) naming the first rank tensor whose name, dtype, shape or offset differs
// between the live plan and the plan of an update, so that nothing is staged for weights that would
// not fit.
void check_same_layout(const Plan& live, const Plan& next, const std::string& model_path);

}  // namespace shardload::reload
