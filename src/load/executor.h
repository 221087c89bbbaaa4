// The loader's engine: executes a plan's pieces for a set of ranks. Each piece becomes a part of a
// file range: read straight into its destination (a whole-row run in the destination dtype, or
// rows whose column blocks tile the row), or into a
// bounce buffer and converted from there (casts, divided biases, column blocks that leave gaps or
// are too narrow). Neighbouring parts in a file are merged into jobs of up to 16 MiB, one read each
// (a run of small expert tensors is one preadv, not one read per tensor). Three read paths run the
// same jobs: page cache (preadv into the destinations), mmap, and O_DIRECT through io_uring for
// files that are not cached. Design and measurements: docs/io.md. The distributed loader runs the
// same jobs on bytes another node read (consume_chunk): jobs never cross the cuts it sets.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <compare>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "core/fault_injection.h"
#include "core/parallel_for.h"
#include "format/posix_io.h"
#include "load/direct_reader.h"
#include "load/file_access.h"
#include "load/sigbus_guard.h"
#include "shardload/checkpoint.h"
#include "shardload/convert.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::load {

constexpr uint64_t kDirectChunk = uint64_t{16} << 20;  // work-item size of direct and scatter reads
constexpr uint64_t kGatherChunk = uint64_t{4} << 20;   // bounce size: stays in the L2/L3 caches
constexpr uint64_t kMinScatterBytes = 1024;            // narrower column blocks go through a bounce
constexpr unsigned kDirectDepth = 4;                   // O_DIRECT reads in flight per thread
constexpr int kDirectThreads = 4;  // threads reading O_DIRECT: bounds their slots to 256 MiB


// A destination of a gathered row range: columns [col_begin, col_end) of each source row land
// densely at dst (row i of the group at dst + i * width). Transposed (a checkpoint matrix stored
// [in, out]): source row r, column c lands at element (c - col_begin) * ld + (r - row0) of dst.
struct Consumer {
  std::byte* dst;
  uint64_t col_begin;
  uint64_t col_end;
  DType dtype;
  uint32_t divisor;
  bool transposed = false;
  uint64_t row0 = 0;  // transposed: the source row of dst's column 0 (the whole piece's first row)
  uint64_t ld = 0;    // transposed: dst's row length in elements (the whole piece's rows)
  uint64_t pitch = 0;  // not transposed: bytes from one destination row to the next
  bool dense() const { return pitch == (col_end - col_begin) * dtype_bits(dtype) / 8; }
};

// memcpy, with the common narrow widths as fixed-size moves the compiler inlines.
inline void copy_small(std::byte* dst, const std::byte* src, uint64_t bytes) {
  switch (bytes) {
    case 32: std::memcpy(dst, src, 32); return;
    case 64: std::memcpy(dst, src, 64); return;
    case 128: std::memcpy(dst, src, 128); return;
    case 256: std::memcpy(dst, src, 256); return;
    default: std::memcpy(dst, src, bytes); return;
  }
}

struct Gather {
  uint32_t source;
  uint64_t row_begin;
  uint64_t row_end;
  std::vector<Consumer> consumers;
  bool plain = false;  // every consumer takes the source dtype, undivided: rows are only copied
  // Scatter plan, when every consumer takes the source dtype unchanged and the distinct column
  // blocks tile the row: each row is read by one preadv straight into the consumers of `tiles` (in
  // column order), and a consumer repeating a tile's columns (a replica) copies them from that
  // tile's consumer.
  bool scatter = false;
  std::vector<uint32_t> tiles;
  std::vector<std::pair<uint32_t, uint32_t>> replicas;  // (consumer, tile consumer)
};

// Rows [row_begin, row_end) of a source: pieces with the same rows are read once, for every rank
// that takes them.
struct SourceRows {
  uint32_t source;
  uint64_t row_begin;
  uint64_t row_end;
  auto operator<=>(const SourceRows&) const = default;
};

constexpr uint32_t kNoGather = UINT32_MAX;
constexpr uint32_t kNoCopies = UINT32_MAX;

// One read of a file range, tiled in order by the parts parts_[part_begin, part_end). Parts
// are read straight into their destinations, except bounce parts (casts, divided biases, column
// blocks that leave gaps or are too narrow to read into), which land in a bounce buffer and are
// converted from there; one read serves both.
struct ReadJob {
  uint32_t source;  // the first source tensor (named in errors)
  uint32_t file;
  uint64_t file_offset;  // first source byte
  uint64_t bytes;        // source bytes
  uint64_t bounce_bytes = 0;
  uint64_t part_begin = 0;
  uint64_t part_end = 0;
};

// A part of a read job: the destinations of consecutive file bytes, `bytes` bytes at dst; or rows
// [row_begin, row_end) of gathers_[gather], either scattered (each row split over its tiles,
// replicas copied after) or bounced (converted out of the bounce buffer to every consumer). Rows
// are expanded when the job runs: kept as ranges they cost no memory per row.
struct JobPart {
  std::byte* dst = nullptr;
  uint64_t bytes = 0;
  uint32_t copies = kNoCopies;  // a direct part's other destinations (copies_), filled after the read
  uint32_t gather = kNoGather;
  bool bounce = false;
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
};

// Converts n values, dividing by `divisor` in float32 first when it is not 1 (row bias, --row-bias
// divided).
inline void convert_values(DType src_dtype, const std::byte* src, DType dst_dtype, std::byte* dst,
                    uint64_t n, uint32_t divisor, std::vector<float>& scratch) {
  if (divisor == 1) {
    if (src_dtype == dst_dtype) {
      std::memcpy(dst, src, n * dtype_bits(src_dtype) / 8);
    } else {
      convert(src_dtype, src, dst_dtype, dst, n);
    }
    return;
  }
  scratch.resize(n);
  convert(src_dtype, src, DType::kF32, scratch.data(), n);
  const float d = static_cast<float>(divisor);
  for (float& v : scratch) v /= d;
  convert(DType::kF32, scratch.data(), dst_dtype, dst, n);
}

class Executor {
 public:
  Executor(const Checkpoint& ckpt, const Plan& plan) : ckpt_(ckpt), plan_(plan) {}

  // File offsets (sorted, per file) where a job must begin: pieces are split there and no job
  // crosses one, so that the bytes of each range between cuts can be consumed on their own. Each
  // cut inside a source must fall on one of its row boundaries. Set before adding pieces.
  void set_cuts(std::vector<std::vector<uint64_t>> cuts) { cuts_ = std::move(cuts); }

  // The pieces of each rank that `select` takes (every piece without one), into its buffer.
  void add_ranks(std::vector<RankWeights>& ranks, const PieceSelector& select = {}) {
    for (RankWeights& weights : ranks) {
      const RankPlan& rank = plan_.ranks[static_cast<size_t>(weights.rank)];
      for (const PlanParam& param : rank.params) {
        for (const PlanPiece& piece : param.pieces) {
          if (!select || select(rank.rank, param, piece)) {
            add_piece(param, piece, weights.buffer.data() + param.offset);
          }
        }
      }
    }
  }

  // Every piece of params [first, last) of `rank`, each param at base + its offset: the device
  // loader fills one window of a rank in a staging buffer whose byte 0 stands for rank byte `begin`
  // (base = staging - begin; only the window's bytes are written).
  void add_params(const RankPlan& rank, size_t first, size_t last, std::byte* base) {
    for (size_t i = first; i < last; ++i) {
      const PlanParam& param = rank.params[i];
      for (const PlanPiece& piece : param.pieces) add_piece(param, piece, base + param.offset);
    }
  }

  // Splits the work into jobs in file order, so that reads stay sequential, and merges
  // neighbouring segment jobs into one read (a MoE checkpoint's thousands of small expert
  // tensors lie back to back in the file: one preadv per run, not one pread per tensor).
  void finish() {
    add_direct_jobs();
    add_gathers();
    for (uint32_t g = 0; g < gathers_.size(); ++g) add_gather_units(g);
    std::sort(jobs_.begin(), jobs_.end(), [](const ReadJob& a, const ReadJob& b) {
      return std::tie(a.file, a.file_offset) < std::tie(b.file, b.file_offset);
    });
    std::vector<JobPart> parts;
    parts.reserve(parts_.size());
    std::vector<ReadJob> merged;
    for (const ReadJob& job : jobs_) {
      const bool extend = !merged.empty() && merged.back().file == job.file &&
                          merged.back().file_offset + merged.back().bytes == job.file_offset &&
                          merged.back().bytes + job.bytes <= kDirectChunk &&
                          !is_cut(job.file, job.file_offset) &&
                          merged.back().bounce_bytes + job.bounce_bytes <= kGatherChunk;
      if (!extend) {
        merged.push_back(job);
        merged.back().part_begin = parts.size();
      } else {
        merged.back().bytes += job.bytes;
        merged.back().bounce_bytes += job.bounce_bytes;
      }
      parts.insert(parts.end(), parts_.begin() + static_cast<ptrdiff_t>(job.part_begin),
                   parts_.begin() + static_cast<ptrdiff_t>(job.part_end));
      merged.back().part_end = parts.size();
    }
    jobs_ = std::move(merged);
    parts_ = std::move(parts);
    for (const ReadJob& job : jobs_) {
      total_ += job.bytes;
      max_job_ = std::max(max_job_, job.bytes);
    }
  }

  // Readers for the cold path that outlive one run (the device loader runs one executor per
  // window): their slots are allocated and faulted in once, not once per run. Set before run().
  struct SharedReader {
    std::unique_ptr<load::DirectReader> reader;
    uint64_t capacity = 0;
  };
  void share_direct_readers(std::vector<SharedReader>* readers) { shared_readers_ = readers; }

  uint64_t total_bytes() const { return total_; }
  uint64_t job_count() const { return jobs_.size(); }

  // The jobs [first, last) whose bytes lie in file range [begin, end) of `file`, a range between
  // two cuts.
  std::pair<size_t, size_t> jobs_in(uint32_t file, uint64_t begin, uint64_t end) const {
    const auto at = [&](uint64_t offset) {
      return static_cast<size_t>(
          std::lower_bound(jobs_.begin(), jobs_.end(), std::make_pair(file, offset),
                           [](const ReadJob& job, const std::pair<uint32_t, uint64_t>& key) {
                             return std::tie(job.file, job.file_offset) <
                                    std::tie(key.first, key.second);
                           }) -
          jobs_.begin());
    };
    return {at(begin), at(end)};
  }

  // A thread's buffers on the page-cache read path.
  struct PreadState {
    std::vector<std::byte> bounce;
    std::vector<float> scratch;
    std::vector<iovec> iov;
  };

  // Reads the jobs in file range [begin, end) of `file` (a range between two cuts) through the page
  // cache, straight into their destinations: what consume_chunk does with bytes read elsewhere.
  void read_chunk(uint32_t file, uint64_t begin, uint64_t end, PreadState& state) const {
    const auto [first, last] = jobs_in(file, begin, end);
    for (size_t i = first; i < last; ++i) read_job(jobs_[i], state);
  }

  // Puts the bytes of file range [offset, offset + bytes.size()) of `file` (a range between two
  // cuts, read elsewhere) where this executor's jobs in it take them.
  void consume_chunk(uint32_t file, uint64_t offset, std::span<const std::byte> bytes,
                     std::vector<float>& scratch) const {
    const auto [first, last] = jobs_in(file, offset, offset + bytes.size());
    for (size_t i = first; i < last; ++i) {
      const ReadJob& job = jobs_[i];
      if (job.file_offset + job.bytes > offset + bytes.size()) {
        throw Error(ErrorKind::kInternal, "a read job crosses the end of a transferred range",
                    where(job));
      }
      consume(job, bytes.data() + (job.file_offset - offset), scratch);
    }
  }

  // Runs every job; returns the read path used (`io`, or what kAuto chose).
  IoMode run(int threads, IoMode io, const std::function<void(uint64_t, uint64_t)>& progress,
             const std::atomic<bool>* cancel = nullptr) {
    if (threads <= 0) threads = default_thread_count();
    if (jobs_.empty()) return io == IoMode::kAuto ? IoMode::kPread : io;
    std::vector<uint32_t> files;
    for (const ReadJob& job : jobs_) {
      if (files.empty() || files.back() != job.file) files.push_back(job.file);
    }
    if (io == IoMode::kAuto) {
      std::vector<const SafetensorsFile*> used;
      for (uint32_t f : files) used.push_back(&ckpt_.files()[f]);
      io = mostly_cached(used) ? IoMode::kPread : IoMode::kDirect;
      if (io == IoMode::kDirect && !open_direct_files(files, /*required=*/false))
        io = IoMode::kPread;
      // Cached in 2 MiB folios: a copy out of a mapping is a memcpy, cheaper than a read's walk.
      if (io == IoMode::kPread && load::maps_as_huge_pages(used)) io = IoMode::kMmap;
    } else if (io == IoMode::kDirect) {
      open_direct_files(files, /*required=*/true);
    }
    progress_ = &progress;
    cancel_ = cancel;
    switch (io) {
      case IoMode::kAuto:
      case IoMode::kPread:
        run_pread(threads);
        break;
      case IoMode::kMmap:
        run_mmap(threads);
        break;
      case IoMode::kDirect:
        run_direct(threads);
        break;
    }
    return io;
  }

 private:
  // Adds the piece, split where a cut falls inside its rows.
  void add_piece(const PlanParam& param, const PlanPiece& piece, std::byte* param_base) {
    const PlanSource& src = plan_.sources[piece.source];
    if (src.file >= cuts_.size() || cuts_[src.file].empty()) {
      add_whole_piece(param, piece, param_base, piece);
      return;
    }
    const std::vector<uint64_t>& cuts = cuts_[src.file];
    const uint64_t row_bytes = src.cols * dtype_bits(src.dtype) / 8;
    // A transposed piece's parts keep its destination: each row lands by its own index (Consumer).
    const uint64_t dst_row_bytes = piece.transposed ? 0 : piece.dst_row_values() * dtype_bits(param.dtype) / 8;
    PlanPiece part = piece;
    auto cut = std::upper_bound(cuts.begin(), cuts.end(),
                                src.file_offset + piece.row_begin * row_bytes);
    for (; cut != cuts.end() && *cut < src.file_offset + piece.row_end * row_bytes; ++cut) {
      if (row_bytes == 0 || (*cut - src.file_offset) % row_bytes != 0) {
        throw Error(ErrorKind::kInternal, "a transfer range does not end on a row boundary",
                    {.tensor = src.name});
      }
      part.row_end = (*cut - src.file_offset) / row_bytes;
      add_whole_piece(param, part, param_base, piece);
      part.dst_offset += part.rows() * dst_row_bytes;
      part.row_begin = part.row_end;
    }
    part.row_end = piece.row_end;
    add_whole_piece(param, part, param_base, piece);
  }

  bool is_cut(uint32_t file, uint64_t offset) const {
    return file < cuts_.size() &&
           std::binary_search(cuts_[file].begin(), cuts_[file].end(), offset);
  }

  // `piece`, a part of `whole` (itself, or its rows between two cuts).
  void add_whole_piece(const PlanParam& param, const PlanPiece& piece, std::byte* param_base,
                       const PlanPiece& whole) {
    const PlanSource& src = plan_.sources[piece.source];
    const bool whole_rows = piece.col_begin == 0 && piece.col_end == src.cols;
    const SourceRows rows{piece.source, piece.row_begin, piece.row_end};
    const bool dense = piece.dst_row_values() == piece.cols();
    if (whole_rows && dense && src.dtype == param.dtype && piece.divisor == 1 && !piece.transposed) {
      direct_pieces_.push_back({rows, param_base + piece.dst_offset});
      return;
    }
    gather_pieces_.push_back({rows,
                              {param_base + piece.dst_offset, piece.col_begin, piece.col_end,
                               param.dtype, piece.divisor, piece.transposed, whole.row_begin,
                               whole.rows(), piece.dst_row_values() * dtype_bits(param.dtype) / 8}});
  }

  // The gathers: pieces of the same source rows grouped by sorting (stable: consumers keep the
  // order they were added in).
  void add_gathers() {
    std::stable_sort(gather_pieces_.begin(), gather_pieces_.end(),
                     [](const GatherPiece& a, const GatherPiece& b) { return a.rows < b.rows; });
    for (size_t i = 0; i < gather_pieces_.size(); ++i) {
      const GatherPiece& piece = gather_pieces_[i];
      if (i == 0 || piece.rows != gather_pieces_[i - 1].rows) {
        Gather& gather = gathers_.emplace_back();
        gather.source = piece.rows.source;
        gather.row_begin = piece.rows.row_begin;
        gather.row_end = piece.rows.row_end;
      }
      gathers_.back().consumers.push_back(piece.consumer);
    }
  }

  // Jobs of the whole-row pieces, in chunks of up to kDirectChunk. Ranks that hold the same rows
  // (replicated norms, kv heads shared by ranks) get them from one read: the first rank's part is
  // read, the others copied from it once the job is done, so that each file byte is read once and
  // neighbours still merge. Grouped by sorting (stable: the first rank added reads).
  void add_direct_jobs() {
    std::stable_sort(direct_pieces_.begin(), direct_pieces_.end(),
                     [](const DirectPiece& a, const DirectPiece& b) { return a.rows < b.rows; });
    for (size_t i = 0; i < direct_pieces_.size();) {
      const DirectPiece& first = direct_pieces_[i];
      const PlanSource& src = plan_.sources[first.rows.source];
      const uint64_t row_bytes = src.cols * dtype_bits(src.dtype) / 8;
      const uint64_t bytes = (first.rows.row_end - first.rows.row_begin) * row_bytes;
      const uint64_t begin = src.file_offset + first.rows.row_begin * row_bytes;
      size_t end = i + 1;
      while (end < direct_pieces_.size() && direct_pieces_[end].rows == first.rows) ++end;
      for (uint64_t at = 0; at < bytes; at += kDirectChunk) {
        const uint64_t n = std::min(kDirectChunk, bytes - at);
        ReadJob& job = jobs_.emplace_back(
            ReadJob{first.rows.source, static_cast<uint32_t>(src.file), begin + at, n});
        job.part_begin = parts_.size();
        JobPart& part = parts_.emplace_back(JobPart{.dst = first.dst + at, .bytes = n});
        if (end > i + 1) {
          part.copies = static_cast<uint32_t>(copies_.size());
          std::vector<std::byte*>& copies = copies_.emplace_back();
          for (size_t k = i + 1; k < end; ++k) copies.push_back(direct_pieces_[k].dst + at);
        }
        job.part_end = parts_.size();
      }
      i = end;
    }
  }

  // Jobs of a gathered row range: a scatter gather becomes segment jobs (each row read straight
  // into its column blocks, replicas copied after), the others bounce jobs of cache size.
  void add_gather_units(uint32_t g) {
    plan_scatter(gathers_[g]);
    const Gather& gather = gathers_[g];
    const PlanSource& src = plan_.sources[gather.source];
    const uint64_t esize = dtype_bits(src.dtype) / 8;
    const uint64_t row_bytes = src.cols * esize;
    const uint64_t unit_bytes = gather.scatter ? kDirectChunk : kGatherChunk;
    const uint64_t rows_per_unit =
        std::max<uint64_t>(1, unit_bytes / std::max<uint64_t>(row_bytes, 1));
    for (uint64_t row = gather.row_begin; row < gather.row_end; row += rows_per_unit) {
      const uint64_t end = std::min(gather.row_end, row + rows_per_unit);
      ReadJob job{gather.source, static_cast<uint32_t>(src.file), src.file_offset + row * row_bytes,
                (end - row) * row_bytes};
      job.bounce_bytes = gather.scatter ? 0 : job.bytes;
      job.part_begin = parts_.size();
      parts_.push_back({.bytes = job.bytes,
                        .gather = g,
                        .bounce = !gather.scatter,
                        .row_begin = row,
                        .row_end = end});
      job.part_end = parts_.size();
      jobs_.push_back(job);
    }
  }

  void plan_scatter(Gather& gather) const {
    const PlanSource& src = plan_.sources[gather.source];
    gather.plain = std::all_of(
        gather.consumers.begin(), gather.consumers.end(),
        [&](const Consumer& c) { return c.dtype == src.dtype && c.divisor == 1 && !c.transposed; });
    if (!gather.plain) return;  // a conversion: bounce
    std::vector<uint32_t> order(gather.consumers.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const Consumer& x = gather.consumers[a];
      const Consumer& y = gather.consumers[b];
      return std::tie(x.col_begin, x.col_end) < std::tie(y.col_begin, y.col_end);
    });
    uint64_t covered = 0;
    for (uint32_t i : order) {
      const Consumer& c = gather.consumers[i];
      if (!gather.tiles.empty()) {
        const Consumer& last = gather.consumers[gather.tiles.back()];
        if (c.col_begin == last.col_begin && c.col_end == last.col_end) {
          gather.replicas.emplace_back(i, gather.tiles.back());
          continue;
        }
      }
      if (c.col_begin != covered) return;  // a gap or an overlap: bounce
      gather.tiles.push_back(i);
      covered = c.col_end;
    }
    // Blocks narrower than kMinScatterBytes (a MoE-TP split of a small expert's rows: 64-byte
    // blocks) cost the kernel more per iovec than a bounce copy costs per byte: bounce those.
    const uint64_t esize = dtype_bits(src.dtype) / 8;
    for (uint32_t t : gather.tiles) {
      const Consumer& c = gather.consumers[t];
      if ((c.col_end - c.col_begin) * esize < kMinScatterBytes) return;
    }
    gather.scatter = covered == src.cols;
  }

  ErrorDetails where(const ReadJob& job) const {
    return {.file = ckpt_.files()[job.file].path(), .tensor = plan_.sources[job.source].name};
  }

  void check_cancel() const {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
      throw Error(ErrorKind::kCancelled, "the update was cancelled while staging");
    }
  }

  void report(const ReadJob& job) {
    const uint64_t now = done_.fetch_add(job.bytes) + job.bytes;
    if (*progress_) (*progress_)(now, total_);
  }

  // Calls f(dst, bytes) for each destination of the job's bytes, in file order; bounce parts land
  // in `bounce`, one after the other.
  template <class F>
  void for_each_segment(const ReadJob& job, std::byte* bounce, F&& f) const {
    for (uint64_t i = job.part_begin; i < job.part_end; ++i) {
      const JobPart& part = parts_[i];
      if (part.bounce) {
        f(bounce, part.bytes);
        bounce += part.bytes;
      } else {
        for_each_destination(part, f);
      }
    }
  }

  // Calls f(dst, bytes) for each destination of a part read straight into place, in file order:
  // the part's one destination, or each row's column blocks.
  template <class F>
  void for_each_destination(const JobPart& part, F&& f) const {
    if (part.gather == kNoGather) {
      f(part.dst, part.bytes);
      return;
    }
    const Gather& gather = gathers_[part.gather];
    const uint64_t esize = dtype_bits(plan_.sources[gather.source].dtype) / 8;
    for (uint64_t r = part.row_begin - gather.row_begin; r < part.row_end - gather.row_begin; ++r) {
      for (uint32_t t : gather.tiles) {
        const Consumer& c = gather.consumers[t];
        f(c.dst + r * c.pitch, (c.col_end - c.col_begin) * esize);
      }
    }
  }

  // After the read: bounce parts converted out of `bounce`, replicated column blocks of scatter
  // parts copied from the tile that was read.
  void finish_job(const ReadJob& job, const std::byte* bounce, std::vector<float>& scratch) const {
    for (uint64_t i = job.part_begin; i < job.part_end; ++i) {
      if (parts_[i].bounce) {
        convert_rows(parts_[i], bounce, scratch);
        bounce += parts_[i].bytes;
      }
    }
    copy_replicas(job);
  }

  // Replicas, once the job is read: other ranks' copies of a direct part, and replicated column
  // blocks of scatter rows (copied from the tile that was read).
  void copy_replicas(const ReadJob& job) const {
    for (uint64_t i = job.part_begin; i < job.part_end; ++i) {
      const JobPart& part = parts_[i];
      if (part.copies != kNoCopies) {
        for (std::byte* dst : copies_[part.copies]) std::memcpy(dst, part.dst, part.bytes);
      }
      if (part.gather == kNoGather || part.bounce) continue;
      const Gather& gather = gathers_[part.gather];
      const uint64_t esize = dtype_bits(plan_.sources[gather.source].dtype) / 8;
      const uint64_t first = part.row_begin - gather.row_begin;
      for (const auto& [replica, tile] : gather.replicas) {
        const Consumer& c = gather.consumers[replica];
        const Consumer& read = gather.consumers[tile];
        const uint64_t width = (c.col_end - c.col_begin) * esize;
        if (c.dense() && read.dense()) {
          std::memcpy(c.dst + first * width, read.dst + first * width, (part.row_end - part.row_begin) * width);
          continue;
        }
        for (uint64_t r = first; r < first + (part.row_end - part.row_begin); ++r) {
          std::memcpy(c.dst + r * c.pitch, read.dst + r * read.pitch, width);
        }
      }
    }
  }

  // Puts a job's source bytes, already in memory at `src`, where they belong.
  void consume(const ReadJob& job, const std::byte* src, std::vector<float>& scratch) const {
    for (uint64_t i = job.part_begin; i < job.part_end; ++i) {
      const JobPart& part = parts_[i];
      if (part.bounce) {
        convert_rows(part, src, scratch);
        src += part.bytes;
        continue;
      }
      for_each_destination(part, [&](std::byte* dst, uint64_t bytes) {
        std::memcpy(dst, src, bytes);
        src += bytes;
      });
    }
    copy_replicas(job);
  }

  void convert_rows(const JobPart& part, const std::byte* src_bytes,
                    std::vector<float>& scratch) const {
    const Gather& gather = gathers_[part.gather];
    const PlanSource& src = plan_.sources[gather.source];
    const uint64_t src_esize = dtype_bits(src.dtype) / 8;
    const uint64_t row_bytes = src.cols * src_esize;
    if (gather.plain) {
      copy_block_rows(gather, part, src_bytes, src_esize, row_bytes);
      return;
    }
    for (const Consumer& c : gather.consumers) {
      if (c.transposed) {
        transpose_rows(c, src.dtype, src_bytes, row_bytes, part.row_begin, part.row_end, scratch);
        continue;
      }
      const uint64_t width = c.col_end - c.col_begin;
      const uint64_t dst_row_bytes = c.pitch;
      std::byte* dst = c.dst + (part.row_begin - gather.row_begin) * dst_row_bytes;
      const uint64_t rows = part.row_end - part.row_begin;
      if (width == src.cols && c.dense()) {  // whole rows: one call for the part
        convert_values(src.dtype, src_bytes, c.dtype, dst, rows * width, c.divisor, scratch);
        continue;
      }
      for (uint64_t r = 0; r < rows; ++r) {
        convert_values(src.dtype, src_bytes + r * row_bytes + c.col_begin * src_esize, c.dtype,
                       dst + r * dst_row_bytes, width, c.divisor, scratch);
      }
    }
  }

  // Source rows [row_begin, row_end) (at src_bytes, row_bytes apart) into a transposed consumer:
  // straight from the source when no cast is needed, else kTileRows rows at a time converted into a
  // tile and transposed from there.
  static void transpose_rows(const Consumer& c, DType src_dtype, const std::byte* src_bytes,
                             uint64_t row_bytes, uint64_t row_begin, uint64_t row_end,
                             std::vector<float>& scratch) {
    constexpr uint64_t kTileRows = 32;
    thread_local std::vector<std::byte> tile;
    const uint64_t width = c.col_end - c.col_begin;
    const uint64_t esize = dtype_bits(c.dtype) / 8;
    const uint64_t src_esize = dtype_bits(src_dtype) / 8;
    if (src_dtype == c.dtype && c.divisor == 1) {  // no conversion: one pass, source to destination
      return transpose_any(esize, src_bytes + c.col_begin * src_esize, row_bytes, row_end - row_begin, width,
                           c.dst + (row_begin - c.row0) * esize, c.ld);
    }
    tile.resize(kTileRows * width * esize);
    for (uint64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
      const uint64_t n = std::min(kTileRows, row_end - r0);
      for (uint64_t i = 0; i < n; ++i) {
        convert_values(src_dtype, src_bytes + (r0 - row_begin + i) * row_bytes + c.col_begin * src_esize,
                       c.dtype, tile.data() + i * width * esize, width, c.divisor, scratch);
      }
      transpose_any(esize, tile.data(), width * esize, n, width, c.dst + (r0 - c.row0) * esize, c.ld);
    }
  }

  // transpose_block for elements of `esize` bytes.
  static void transpose_any(uint64_t esize, const std::byte* src, uint64_t src_row_bytes, uint64_t rows,
                            uint64_t cols, std::byte* out, uint64_t ld) {
    switch (esize) {
      case 1: return transpose_block<uint8_t>(src, src_row_bytes, rows, cols, out, ld);
      case 2: return transpose_block<uint16_t>(src, src_row_bytes, rows, cols, out, ld);
      case 4: return transpose_block<uint32_t>(src, src_row_bytes, rows, cols, out, ld);
      default: return transpose_block<uint64_t>(src, src_row_bytes, rows, cols, out, ld);
    }
  }

  // rows x cols elements of type T, row r at src + r * src_row_bytes, to out as cols x rows with rows
  // ld elements apart, in square tiles small enough that both sides stay in the L1 cache.
  template <class T>
  static void transpose_block(const std::byte* src, uint64_t src_row_bytes, uint64_t rows, uint64_t cols,
                              std::byte* out, uint64_t ld) {
    constexpr uint64_t kTile = 64 / sizeof(T) < 16 ? 16 : 64 / sizeof(T);  // a cache line of T per side
    for (uint64_t r0 = 0; r0 < rows; r0 += kTile) {
      const uint64_t r1 = std::min(rows, r0 + kTile);
      for (uint64_t c0 = 0; c0 < cols; c0 += kTile) {
        const uint64_t c1 = std::min(cols, c0 + kTile);
        T block[kTile][kTile];
        for (uint64_t r = r0; r < r1; ++r) {
          std::memcpy(block[r - r0], src + r * src_row_bytes + c0 * sizeof(T), (c1 - c0) * sizeof(T));
        }
        for (uint64_t c = c0; c < c1; ++c) {
          T line[kTile];
          for (uint64_t r = r0; r < r1; ++r) line[r - r0] = block[r - r0][c - c0];
          std::memcpy(out + (c * ld + r0) * sizeof(T), line, (r1 - r0) * sizeof(T));
        }
      }
    }
  }

  // Column blocks that need no conversion, row by row: each source row is read once (the blocks
  // of MoE-TP-split experts are as narrow as 64 bytes, one inlined move each).
  void copy_block_rows(const Gather& gather, const JobPart& part, const std::byte* src_bytes,
                       uint64_t esize, uint64_t row_bytes) const {
    const uint64_t first = part.row_begin - gather.row_begin;
    const uint64_t rows = part.row_end - part.row_begin;
    for (uint64_t r = 0; r < rows; ++r) {
      const std::byte* row = src_bytes + r * row_bytes;
      for (const Consumer& c : gather.consumers) {
        copy_small(c.dst + (first + r) * c.pitch, row + c.col_begin * esize, (c.col_end - c.col_begin) * esize);
      }
    }
  }

  // Page cache: segment jobs are one preadv straight into their destinations (one kernel copy
  // per byte). Jobs with bounce parts are copied out of a mapping of their file range instead
  // (one copy, where a pread into a bounce buffer and the copy out of it are two), or, where the
  // kernel refuses the mapping, read into a per-thread bounce buffer.
  void run_pread(int threads) {
    std::vector<PreadState> states(static_cast<size_t>(threads));
    parallel_for(jobs_.size(), threads, [&](size_t i, int thread) {
      check_cancel();
      read_job(jobs_[i], states[static_cast<size_t>(thread)]);
      report(jobs_[i]);
    });
  }

  void read_job(const ReadJob& job, PreadState& state) const {
    const int fd = ckpt_.files()[job.file].fd();
    if (job.bounce_bytes > 0) {
      MappedRange range;
      if (range.map(fd, job.file_offset, job.bytes)) {
        consume_mapped(job, range.data(), state.scratch);
        return;
      }
    }
    if (state.bounce.size() < job.bounce_bytes) state.bounce.resize(job.bounce_bytes);
    state.iov.clear();
    for_each_segment(job, state.bounce.data(), [&](std::byte* dst, uint64_t bytes) {
      state.iov.push_back({dst, bytes});
    });
    format::preadv_exact(fd, state.iov, job.file_offset, where(job));
    finish_job(job, state.bounce.data(), state.scratch);
  }

  // consume() out of a mapping of the job's file bytes at `src`. A file that shrank under the
  // mapping (or a page the kernel cannot read in) raises SIGBUS, reported as Error(kIo) here.
  void consume_mapped(const ReadJob& job, const std::byte* src, std::vector<float>& scratch) const {
    fault::before_read(job.bytes, where(job));
    const bool read = load::read_mapped_guarded(src, job.bytes, [&] { consume(job, src, scratch); });
    if (!read) {
      throw Error(ErrorKind::kIo, "the file ended under its mapping (was it truncated while loading?)",
                  where(job));
    }
    fault::after_read(job.bytes);
  }

  // mmap: each job copied out of a mapping of its file range (widened to 2 MiB blocks, so that
  // 2 MiB page-cache folios map as huge pages), unmapped when the job is done: the mapped file
  // pages never add more than a job per thread to the resident set.
  void run_mmap(int threads) {
    std::vector<std::vector<float>> scratch(static_cast<size_t>(threads));
    parallel_for(jobs_.size(), threads, [&](size_t i, int thread) {
      check_cancel();
      const ReadJob& job = jobs_[i];
      MappedRange range;
      if (!range.map(ckpt_.files()[job.file].fd(), job.file_offset, job.bytes)) {
        throw format::io_error("cannot mmap", errno, where(job));
      }
      consume_mapped(job, range.data(), scratch[static_cast<size_t>(thread)]);
      report(job);
    });
  }

  // Cold: O_DIRECT through io_uring, kDirectDepth reads in flight per thread, each thread copying
  // the oldest out while the device fills the others. At most kDirectThreads threads read: their
  // slots are the only memory this path adds.
  void run_direct(int threads) {
    const int readers = std::min(threads, kDirectThreads);
    std::atomic<size_t> next{0};
    if (shared_readers_ != nullptr && shared_readers_->size() < static_cast<size_t>(readers))
      shared_readers_->resize(static_cast<size_t>(readers));
    parallel_for(static_cast<size_t>(readers), readers, [&](size_t index, int) {
      std::unique_ptr<load::DirectReader> own;
      load::DirectReader* shared = nullptr;
      if (shared_readers_ != nullptr) {
        SharedReader& slot = (*shared_readers_)[index];
        if (!slot.reader || slot.capacity < max_job_) {
          slot.capacity = std::max(max_job_, kDirectChunk);
          slot.reader = std::make_unique<load::DirectReader>(kDirectDepth, slot.capacity);
        }
        shared = slot.reader.get();
      } else {
        own = std::make_unique<load::DirectReader>(kDirectDepth, max_job_);
      }
      load::DirectReader& reader = shared != nullptr ? *shared : *own;
      std::vector<float> scratch;
      for (;;) {
        while (!reader.full()) {
          check_cancel();
          const size_t i = next.fetch_add(1);
          if (i >= jobs_.size()) break;
          const ReadJob& job = jobs_[i];
          reader.submit(direct_fds_[job.file].get(), job.file_offset, job.bytes, i, where(job));
        }
        if (reader.empty()) break;
        const load::DirectReader::Done done = reader.wait_oldest();
        consume(jobs_[done.tag], done.data, scratch);
        report(jobs_[done.tag]);
        reader.pop_oldest();
      }
    });
  }

  // Opens every file of `files` with O_DIRECT; false (or, when required, Error) when one refuses.
  bool open_direct_files(const std::vector<uint32_t>& files, bool required) {
    direct_fds_ = load::open_direct_files(ckpt_.files(), files, required);
    return !direct_fds_.empty();
  }

  const Checkpoint& ckpt_;
  const Plan& plan_;
  std::vector<ReadJob> jobs_;
  std::vector<JobPart> parts_;
  std::vector<Gather> gathers_;
  // Pieces read through a gather (casts, divided biases, column blocks), grouped by finish().
  struct GatherPiece {
    SourceRows rows;
    Consumer consumer;
  };
  std::vector<GatherPiece> gather_pieces_;
  // Whole-row pieces in the destination dtype, turned into jobs by finish().
  struct DirectPiece {
    SourceRows rows;
    std::byte* dst;
  };
  std::vector<DirectPiece> direct_pieces_;
  std::vector<std::vector<std::byte*>> copies_;  // JobPart::copies
  std::vector<UniqueFd> direct_fds_;
  std::vector<std::vector<uint64_t>> cuts_;  // per file: offsets where a job must begin
  uint64_t total_ = 0;
  uint64_t max_job_ = 0;
  std::atomic<uint64_t> done_{0};
  const std::function<void(uint64_t, uint64_t)>* progress_ = nullptr;
  const std::atomic<bool>* cancel_ = nullptr;
  std::vector<SharedReader>* shared_readers_ = nullptr;
};

}  // namespace shardload::load
