#include "reload/staging.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/fault_injection.h"
#include "core/parallel_copy.h"
#include "core/shape_text.h"
#include "shardload/error.h"
#include "shardload/tensor.h"

namespace shardload::reload {
namespace {


}  // namespace

void add_range(Unit& unit, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  if (!unit.ranges.empty() && unit.ranges.back().offset + unit.ranges.back().bytes == offset) {
    unit.ranges.back().bytes += bytes;  // neighbours merge: fewer, larger copies
  } else {
    unit.ranges.push_back({offset, bytes});
  }
  unit.bytes += bytes;
}

std::vector<std::vector<size_t>> group_units(const std::vector<Unit>& units, uint64_t bound,
                                             const Plan& plan,
                                             const std::vector<RankWeights>& ranks,
                                             const std::vector<size_t>& together) {
  std::vector<std::vector<size_t>> groups;
  if (units.empty()) return groups;
  if (bound == 0) {
    groups.emplace_back(units.size());
    for (size_t i = 0; i < units.size(); ++i) groups[0][i] = i;
    return groups;
  }
  // Items placed whole: a unit, or the units sharing a `together` id, in order of their first unit.
  std::vector<std::vector<size_t>> items;
  std::vector<size_t> item_of(together.empty() ? 0 : units.size(), SIZE_MAX);
  for (size_t i = 0; i < units.size(); ++i) {
    if (together.empty()) {
      items.push_back({i});
      continue;
    }
    size_t& item = item_of.at(together[i]);
    if (item == SIZE_MAX) {
      item = items.size();
      items.emplace_back();
    }
    items[item].push_back(i);
  }
  uint64_t used = 0;
  for (const std::vector<size_t>& item : items) {
    uint64_t bytes = 0;
    for (size_t u : item) bytes += units[u].bytes;
    if (bytes > bound) {
      const Unit& unit = units[item.front()];
      throw Error(ErrorKind::kInvalidArgument,
                  item.size() == 1
                      ? "a module is larger than the staging bound"
                      : fmt::format("{} modules that exchange expert slots between ranks must be "
                                    "staged together, and are larger than the staging bound",
                                    item.size()),
                  {.tensor = plan.modules[unit.module].name,
                   .field = fmt::format("staging_bytes (rank {})", ranks[unit.rank_index].rank),
                   .expected = fmt::format("at least {} bytes", bytes),
                   .found = fmt::format("{} bytes", bound)});
    }
    if (groups.empty() || used + bytes > bound) {
      groups.emplace_back();
      used = 0;
    }
    groups.back().insert(groups.back().end(), item.begin(), item.end());
    used += bytes;
  }
  return groups;
}

Staging::Staging(LiveModel& live) {
  ranks_.reserve(live.ranks.size());
  const bool spare = live.spare.active();
  std::vector<AlignedBuffer> kept = std::move(spare ? live.spare.buffers : live.kept_staging);
  live.kept_staging.clear();
  live.spare.buffers.clear();
  const bool reuse = kept.size() == live.ranks.size() &&
                     std::equal(kept.begin(), kept.end(), live.ranks.begin(),
                                [](const AlignedBuffer& b, const RankWeights& w) {
                                  return b.size() == w.buffer.size();
                                });
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    const RankWeights& weights = live.ranks[i];
    // Bytes no piece writes (alignment gaps, vocab padding) are zero in every staging of this
    // layout, so a kept buffer needs no clearing.
    RankWeights mirror{
        weights.rank, reuse ? std::move(kept[i]) : AlignedBuffer(weights.buffer.size()), {}};
    mirror.processed.assign(live.plan.modules.size(), 0);
    ranks_.push_back(std::move(mirror));
    const size_t id = static_cast<size_t>(weights.rank);
    if (index_of_.size() <= id) index_of_.resize(id + 1);
    index_of_[id] = i;
  }
}

void Staging::return_spare(LiveModel& live) {
  live.spare.buffers.clear();
  for (RankWeights& mirror : ranks_) live.spare.buffers.push_back(std::move(mirror.buffer));
}

void Staging::keep(LiveModel& live) {
  live.kept_staging.clear();
  for (RankWeights& mirror : ranks_) live.kept_staging.push_back(std::move(mirror.buffer));
}

void Staging::release(const std::vector<Unit>& units, const std::vector<size_t>& group) {
  for (size_t u : group) {
    const Unit& unit = units[u];
    std::byte* base = ranks_[unit.rank_index].buffer.data();
    for (const ByteRange& r : unit.ranges) {
      // Whole pages inside the range only: a page shared with a neighbour may hold staged bytes of
      // another unit of a later group.
      const uint64_t begin = (r.offset + kPageBytes - 1) / kPageBytes * kPageBytes;
      const uint64_t end = (r.offset + r.bytes) / kPageBytes * kPageBytes;
      if (end > begin && ranks_[unit.rank_index].buffer.size() >= kMappedBufferBytes) {
        madvise(base + begin, end - begin, MADV_DONTNEED);  // reads back as zero, costs no memory
      }
    }
  }
}

double commit_group(LiveModel& live, Staging& staging, const std::vector<Unit>& units,
                    const std::vector<size_t>& group, const UpdateOptions& options) {
  std::vector<ByteCopy> copies;
  for (size_t u : group) {
    const Unit& unit = units[u];
    std::byte* dst = live.ranks[unit.rank_index].buffer.data();
    const std::byte* src = staging.ranks()[unit.rank_index].buffer.data();
    for (const ByteRange& r : unit.ranges) copies.push_back({dst + r.offset, src + r.offset, r.bytes});
  }
  const std::vector<std::vector<ByteCopy>> shares = copy_shares(copies, options.threads);
  const auto start = std::chrono::steady_clock::now();
  if (options.begin_commit) options.begin_commit();
  fault::in_commit();
  // memcpy cannot fail: once the first byte is written the group completes.
  run_copy_shares(shares, options.threads);
  if (options.end_commit) options.end_commit();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FileWatch::FileWatch(const Checkpoint& checkpoint) {
  for (const SafetensorsFile& file : checkpoint.files()) {
    struct stat st {};
    if (fstat(file.fd(), &st) != 0) {
      throw Error(ErrorKind::kIo, fmt::format("fstat failed: {}", std::strerror(errno)),
                  {.file = file.path()});
    }
    files_.push_back({file.path(), file.fd(), st.st_dev, st.st_ino, st.st_size, st.st_mtim});
  }
}

void FileWatch::check() const {
  for (const Identity& id : files_) {
    struct stat now {};
    struct stat named {};
    const bool same_open = fstat(id.fd, &now) == 0 && now.st_size == id.size &&
                           now.st_mtim.tv_sec == id.mtime.tv_sec &&
                           now.st_mtim.tv_nsec == id.mtime.tv_nsec;
    const bool same_name =
        stat(id.path.c_str(), &named) == 0 && named.st_dev == id.dev && named.st_ino == id.ino;
    if (!same_open || !same_name) {
      throw Error(ErrorKind::kConflict,
                  "the file changed while it was being read; nothing was changed",
                  {.file = id.path,
                   .expected = fmt::format("{} bytes, unmodified", id.size),
                   .found = same_open ? "replaced by another file"
                                      : fmt::format("{} bytes, modified", now.st_size)});
    }
  }
}

void check_same_layout(const Plan& live, const Plan& next, const std::string& model_path) {
  if (live.ranks.size() != next.ranks.size()) {
    throw Error(ErrorKind::kConflict, "the update plans to another number of ranks",
                {.file = model_path,
                 .expected = fmt::format("{}", live.ranks.size()),
                 .found = fmt::format("{}", next.ranks.size())});
  }
  // The same scheme, down to the scales' grid: a channel-wise update of per-tensor weights would
  // change the scales' shapes under captured graphs.
  if (std::string live_scheme = live.format.scheme, next_scheme = next.format.scheme; live_scheme != next_scheme) {
    throw Error(ErrorKind::kConflict, "the update has another quantization than the live weights",
                {.file = model_path,
                 .field = "quantization_config",
                 .expected = std::move(live_scheme),
                 .found = std::move(next_scheme)});
  }
  for (size_t r = 0; r < live.ranks.size(); ++r) {
    const RankPlan& a = live.ranks[r];
    const RankPlan& b = next.ranks[r];
    for (size_t i = 0; i < std::max(a.params.size(), b.params.size()); ++i) {
      if (i >= a.params.size() || i >= b.params.size() || a.params[i].name != b.params[i].name) {
        throw Error(ErrorKind::kConflict, "the update has other rank tensors than the live weights",
                    {.file = model_path,
                     .field = fmt::format("rank {} tensor #{}", r, i),
                     .expected = i < a.params.size() ? a.params[i].name : "no tensor",
                     .found = i < b.params.size() ? b.params[i].name : "no tensor"});
      }
      const PlanParam& p = a.params[i];
      const PlanParam& q = b.params[i];
      if (p.dtype != q.dtype) {
        throw Error(ErrorKind::kConflict, "dtype differs from the live tensor",
                    {.file = model_path,
                     .tensor = p.name,
                     .expected = std::string(dtype_name(p.dtype)),
                     .found = std::string(dtype_name(q.dtype))});
      }
      if (p.shape != q.shape || p.offset != q.offset || p.nbytes != q.nbytes ||
          p.module != q.module || p.role != q.role) {
        throw Error(ErrorKind::kConflict, "shape differs from the live tensor",
                    {.file = model_path,
                     .tensor = p.name,
                     .expected = shape_text(p.shape),
                     .found = shape_text(q.shape)});
      }
    }
    if (a.bytes != b.bytes) {
      throw Error(ErrorKind::kConflict, "the rank size differs from the live buffer",
                  {.file = model_path,
                   .field = fmt::format("rank {}", r),
                   .expected = fmt::format("{} bytes", a.bytes),
                   .found = fmt::format("{} bytes", b.bytes)});
    }
  }
}

}  // namespace shardload::reload
