// Double buffering (LiveModel::spare): a change is staged straight into the spare buffers and
// committed by swapping them with the live ones, so the bytes are written once and readers wait only
// for the swap. What keeps the spare whole is the stale list: the ranges the last change rewrote in
// the other buffer.
#include <algorithm>
#include <chrono>
#include <utility>

#include "core/fault_injection.h"
#include "core/parallel_copy.h"
#include "reload/staging.h"

namespace shardload::reload {
namespace {

using Range = std::pair<uint64_t, uint64_t>;  // offset, bytes

// Sorted, with neighbours and overlaps merged.
std::vector<Range> merged(std::vector<Range> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<Range> out;
  for (const Range& r : ranges) {
    if (r.second == 0) continue;
    if (!out.empty() && r.first <= out.back().first + out.back().second) {
      const uint64_t end = std::max(out.back().first + out.back().second, r.first + r.second);
      out.back().second = end - out.back().first;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// `ranges` less `cut` (both merged).
std::vector<Range> minus(const std::vector<Range>& ranges, const std::vector<Range>& cut) {
  std::vector<Range> out;
  size_t c = 0;
  for (const Range& r : ranges) {
    uint64_t at = r.first;
    const uint64_t end = r.first + r.second;
    while (c < cut.size() && cut[c].first + cut[c].second <= at) ++c;
    for (size_t k = c; k < cut.size() && cut[k].first < end && at < end; ++k) {
      if (cut[k].first > at) out.push_back({at, cut[k].first - at});
      at = std::max(at, cut[k].first + cut[k].second);
    }
    if (at < end) out.push_back({at, end - at});
  }
  return out;
}

// Per rank (index into live.ranks), the ranges the units rewrite, merged.
std::vector<std::vector<Range>> unit_ranges(size_t ranks, const std::vector<Unit>& units) {
  std::vector<std::vector<Range>> out(ranks);
  for (const Unit& unit : units) {
    for (const ByteRange& r : unit.ranges) out[unit.rank_index].push_back({r.offset, r.bytes});
  }
  for (std::vector<Range>& rank : out) rank = merged(std::move(rank));
  return out;
}

}  // namespace

uint64_t sync_spare(LiveModel& live, const std::vector<Unit>& units, int threads) {
  const std::vector<std::vector<Range>> written = unit_ranges(live.ranks.size(), units);
  live.spare.stale.resize(live.ranks.size());
  std::vector<ByteCopy> copies;
  uint64_t total = 0;
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    for (const Range& r : minus(merged(live.spare.stale[i]), written[i])) {
      copies.push_back({live.spare.buffers[i].data() + r.first, live.ranks[i].buffer.data() + r.first, r.second});
      total += r.second;
    }
  }
  parallel_copy(copies, threads);
  // Whole now but for what the units are about to rewrite: that is what mark_stale records.
  for (size_t i = 0; i < live.ranks.size(); ++i) live.spare.stale[i] = written[i];
  return total;
}

double swap_commit(LiveModel& live, Staging& staging, const UpdateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.begin_commit) options.begin_commit();
  fault::in_commit();
  for (size_t i = 0; i < live.ranks.size(); ++i) std::swap(live.ranks[i].buffer, staging.ranks()[i].buffer);
  if (options.end_commit) options.end_commit();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void mark_stale(LiveModel& live, const std::vector<Unit>& units, bool failed) {
  std::vector<std::vector<Range>> written = unit_ranges(live.ranks.size(), units);
  live.spare.stale.resize(live.ranks.size());
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    if (failed) written[i].insert(written[i].end(), live.spare.stale[i].begin(), live.spare.stale[i].end());
    live.spare.stale[i] = merged(std::move(written[i]));
  }
}

}  // namespace shardload::reload
