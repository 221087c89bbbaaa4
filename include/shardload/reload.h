#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload {

// Which checkpoint tensors an update reads. A name is selected when it matches any of the criteria
// given (substrings, regex, experts); with none given, every tensor is selected.
struct WeightFilter {
  // SGLang's weight_name_filter: the name contains one of them.
  std::vector<std::string> substrings{};
  std::string regex{};  // POSIX extended regex, searched anywhere in the name; empty: unused
  std::vector<std::pair<int, int>> experts{};  // (decoder layer index, logical expert)

  bool selects_all() const { return substrings.empty() && regex.empty() && experts.empty(); }
};

// A second buffer of every live rank (the weight server's double-buffered shared memory): an update or
// a rebalance stages straight into it, and its commit swaps it with the live buffer instead of copying
// (the pause is the swap). Readers of such a pair follow whichever buffer is live (the server's active
// slot word); LiveModel::ranks holds the live one. `stale`: per rank, the byte ranges (offset, bytes)
// where the spare may differ from the live buffer, i.e. what the last change rewrote; the next change
// first copies those of them it does not rewrite itself, so that a filtered update repeated (RL weight
// sync) copies nothing but its own bytes.
struct SpareBuffers {
  std::vector<AlignedBuffer> buffers{};  // one per LiveModel::ranks entry, of the same size; empty: none
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> stale{};
  bool active() const { return !buffers.empty(); }
};

// A model loaded once and then updated in place: its plan, one buffer per rank (every rank of the
// plan, in rank order) and the count of successful updates. Buffers never move or change size.
struct LiveModel {
  // The checkpoint of the last successful load or update: what the server reports and its restart
  // reloads. Nothing reads it after the load: a rebalance moves live bytes, and an update names its
  // own checkpoint. After a filtered update the live bytes are not all from it.
  std::string model_path;
  Plan plan;
  std::vector<RankWeights> ranks;
  uint64_t version = 0;
  // The staging area of the last update with UpdateOptions::keep_staging, reused by the next one so
  // that its pages are not faulted in again (the engines' double buffer); empty otherwise.
  std::vector<AlignedBuffer> kept_staging{};
  // Double buffering (SpareBuffers): set by its owner, the weight server. Each successful change then
  // swaps the buffers of `ranks` with these, so the live addresses alternate between two buffers; an
  // in-process model whose addresses must never change leaves it empty (staging + copy).
  SpareBuffers spare{};
};

struct UpdateOptions {
  int threads = 0;  // 0: one per core
  // Bound on staged bytes (over all ranks); 0: unbounded, one atomic commit.
  uint64_t staging_bytes = 0;
  // Checked while staging; once set, the update stops with nothing changed.
  const std::atomic<bool>* cancel = nullptr;
  // Keep the staging area in LiveModel::kept_staging for the next update: one more copy of the
  // updated bytes stays resident, and the next update does not fault fresh pages in. Ignored with a
  // staging bound, whose point is to use less memory.
  bool keep_staging = false;
  // Run around each commit group, on the calling thread: begin before the first live byte of the
  // group changes, end after its last (the weight server's sequence word).
  // With LiveModel::spare the commit swaps buffers between them, and with every update one group
  // (staging_bytes and keep_staging do not apply: the spare is the staging).
  std::function<void()> begin_commit = {};
  std::function<void()> end_commit = {};
};

struct UpdateResult {
  uint64_t version = 0;
  uint64_t updated_tensors = 0;  // exported rank tensors rewritten, summed over ranks
  uint64_t changed_bytes = 0;    // live bytes rewritten, summed over ranks
  uint64_t read_bytes = 0;       // checkpoint bytes read
  uint64_t local_bytes = 0;   // rebalancing: expert bytes copied from another slot of the same rank
  uint64_t remote_bytes = 0;  // rebalancing: expert bytes copied from a slot of another rank
  uint64_t modules = 0;       // (rank, module) pairs rewritten
  uint64_t groups = 0;        // atomic commit groups
  double seconds_stage = 0;   // read, convert, validate, post-process into staging
  double seconds_commit = 0;  // copy staging to live, all groups (double buffering: the swap)
  uint64_t synced_bytes = 0;  // double buffering: bytes of the last change copied into the spare first
  double max_pause_seconds = 0;  // longest single commit group (begin_commit to end_commit)
  // update_weights: the checkpoint as opened, before its bytes were read (what a weight server
  // records to tell, at a restart, whether the path still holds those bytes).
  CheckpointIdentity source{};
};

// Loads every rank of `parallel` for `model_path` into new buffers (version 0).
LiveModel load_live(const std::string& model_path, const ParallelConfig& parallel,
                    const LoadOptions& options = {});

// Updates the tensors of `model_path` selected by `filter` in place. The checkpoint must plan to
// exactly the live layout (same rank tensors, dtypes, shapes, offsets) under the live parallel
// config and expert map. Every module a tensor selected by name (substring, regex, or an empty
// filter) feeds is reloaded whole (a fused or requantized module needs all its parts) and
// post-processed once. A tensor selected by its expert alone rewrites only the slots of that expert
// (every replica) and reads only that expert's tensors; the merged static FP8 input scale of its
// rank is recomputed from the per-expert scales kept in the rank since the load. No other byte is
// touched. All new bytes are read, converted, validated and post-processed into staging before any
// live byte changes; any error (I/O, header, shape, dtype, a file changed while being read,
// cancellation) leaves every live byte as it was. With `staging_bytes` set, the update commits in
// module groups, each atomic; a failure after some groups committed leaves those groups new and the
// rest old, says so in the error, and still counts as a version change (the bytes did change). A
// single (rank, module) larger than the bound is an error before any change.
UpdateResult update_weights(LiveModel& live, const std::string& model_path,
                            const WeightFilter& filter, const UpdateOptions& options = {});

// Applies a new physical-to-logical expert map (one row per MoE layer, P entries, every expert
// placed in every row) in place, moving live bytes only: nothing is read from storage. Slots whose
// logical expert is unchanged are not rewritten; every other slot is copied from a live slot that
// holds its new expert (of the same rank when there is one, else of another rank), already
// post-processed and with its rows of every per-expert scale; per-rank merged scales (static FP8
// input scales, the maximum over the rank's experts) are recomputed. The result is exactly what a
// fresh load of the live weights under the new map gives, and live.plan becomes that load's plan
// (derived from the live plan, without the checkpoint). A map of the wrong shape or naming an
// unknown expert is rejected before any change; with a staging bound, modules that exchange slots
// between ranks are committed in one group, and a cancellation is honoured only before the first
// commit, so a rebalance is never left half done.
UpdateResult rebalance_experts(LiveModel& live,
                               const std::vector<std::vector<int>>& physical_to_logical,
                               const UpdateOptions& options = {});

// Whether the filter selects a checkpoint tensor name (exposed for tests and the server's replies).
bool filter_selects(const WeightFilter& filter, std::string_view name);

}  // namespace shardload
