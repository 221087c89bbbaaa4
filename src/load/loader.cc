// Executes a plan. Pieces that are a contiguous source run in the destination dtype are read
// straight into the rank buffer with pread (one kernel copy, no bounce); the others (column blocks
// of row-parallel tensors, casts, divided biases) are read once per source row range into a
// per-thread bounce buffer and scattered to every rank that needs those rows, converting on the way
// (one pass, no second copy).
#include "shardload/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>

#include "format/posix_io.h"
#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "shardload/convert.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr uint64_t kDirectChunk = uint64_t{16} << 20;  // work-item size of direct and scatter reads
constexpr uint64_t kGatherChunk = uint64_t{4} << 20;   // bounce size: stays in the L2/L3 caches


// A destination of a gathered row range: columns [col_begin, col_end) of each source row land
// densely at dst (row i of the group at dst + i * width).
struct Consumer {
  std::byte* dst;
  uint64_t col_begin;
  uint64_t col_end;
  DType dtype;
  uint32_t divisor;
};

struct Gather {
  uint32_t source;
  uint64_t row_begin;
  uint64_t row_end;
  std::vector<Consumer> consumers;
  // Scatter plan, when every consumer takes the source dtype unchanged and the distinct column
  // blocks tile the row: each row is read by one preadv straight into the consumers of `tiles` (in
  // column order), and a consumer repeating a tile's columns (a replica) copies them from that
  // tile's consumer.
  bool scatter = false;
  std::vector<uint32_t> tiles;
  std::vector<std::pair<uint32_t, uint32_t>> replicas;  // (consumer, tile consumer)
};

struct Unit {
  uint32_t source;
  uint64_t file_offset;             // first source byte
  uint64_t bytes;                   // source bytes
  std::byte* direct_dst = nullptr;  // direct: read here
  uint32_t gather = 0;              // otherwise: rows [row_begin, row_end) of gathers[gather]
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
};

// Converts n values, dividing by `divisor` in float32 first when it is not 1 (row bias, --row-bias
// divided).
void convert_values(DType src_dtype, const std::byte* src, DType dst_dtype, std::byte* dst,
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

  // The pieces of the rank that `select` takes.
  void add_selected(const RankPlan& rank, std::byte* base, const PieceSelector& select) {
    for (const PlanParam& param : rank.params) {
      for (const PlanPiece& piece : param.pieces) {
        if (select(rank.rank, param, piece)) add_piece(param, piece, base + param.offset);
      }
    }
  }

  // Splits the work into cache-sized units, in file order so that reads stay sequential.
  void finish() {
    for (uint32_t g = 0; g < gathers_.size(); ++g) {
      plan_scatter(gathers_[g]);
      const Gather& gather = gathers_[g];
      const PlanSource& src = plan_.sources[gather.source];
      const uint64_t row_bytes = src.cols * dtype_bits(src.dtype) / 8;
      const uint64_t unit_bytes = gather.scatter ? kDirectChunk : kGatherChunk;
      const uint64_t rows_per_unit =
          std::max<uint64_t>(1, unit_bytes / std::max<uint64_t>(row_bytes, 1));
      for (uint64_t row = gather.row_begin; row < gather.row_end; row += rows_per_unit) {
        const uint64_t end = std::min(gather.row_end, row + rows_per_unit);
        units_.push_back({gather.source, src.file_offset + row * row_bytes, (end - row) * row_bytes,
                          nullptr, g, row, end});
      }
    }
    std::sort(units_.begin(), units_.end(), [&](const Unit& a, const Unit& b) {
      return std::tie(plan_.sources[a.source].file, a.file_offset) <
             std::tie(plan_.sources[b.source].file, b.file_offset);
    });
    for (const Unit& unit : units_) total_ += unit.bytes;
  }

  uint64_t total_bytes() const { return total_; }

  void run(int threads, const std::function<void(uint64_t, uint64_t)>& progress,
           const std::atomic<bool>* cancel = nullptr) {
    if (threads <= 0) threads = default_thread_count();
    std::vector<std::vector<std::byte>> bounce(static_cast<size_t>(threads));
    std::vector<std::vector<float>> scratch(static_cast<size_t>(threads));
    std::atomic<uint64_t> done{0};
    parallel_for(units_.size(), threads, [&](size_t i, int thread) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
        throw Error(ErrorKind::kCancelled, "the update was cancelled while staging");
      }
      const Unit& unit = units_[i];
      run_unit(unit, bounce[static_cast<size_t>(thread)], scratch[static_cast<size_t>(thread)]);
      const uint64_t now = done.fetch_add(unit.bytes) + unit.bytes;
      if (progress) progress(now, total_);
    });
  }

 private:
  void add_piece(const PlanParam& param, const PlanPiece& piece, std::byte* param_base) {
    const PlanSource& src = plan_.sources[piece.source];
    const uint64_t esize = dtype_bits(src.dtype) / 8;
    const bool whole_rows = piece.col_begin == 0 && piece.col_end == src.cols;
    if (whole_rows && src.dtype == param.dtype && piece.divisor == 1) {
      const uint64_t begin = src.file_offset + piece.row_begin * src.cols * esize;
      const uint64_t bytes = piece.rows() * src.cols * esize;
      for (uint64_t at = 0; at < bytes; at += kDirectChunk) {
        units_.push_back({piece.source, begin + at, std::min(kDirectChunk, bytes - at),
                          param_base + piece.dst_offset + at});
      }
      return;
    }
    const auto key = std::make_tuple(piece.source, piece.row_begin, piece.row_end);
    auto [it, inserted] = gather_ids_.emplace(key, static_cast<uint32_t>(gathers_.size()));
    if (inserted) {
      Gather& gather = gathers_.emplace_back();
      gather.source = piece.source;
      gather.row_begin = piece.row_begin;
      gather.row_end = piece.row_end;
    }
    gathers_[it->second].consumers.push_back({param_base + piece.dst_offset, piece.col_begin,
                                              piece.col_end, param.dtype, piece.divisor});
  }

  void run_unit(const Unit& unit, std::vector<std::byte>& bounce,
                std::vector<float>& scratch) const {
    const PlanSource& src = plan_.sources[unit.source];
    const SafetensorsFile& file = ckpt_.files()[src.file];
    if (unit.direct_dst != nullptr) {
      format::pread_exact(file.fd(), {unit.direct_dst, unit.bytes}, unit.file_offset,
                          {.file = file.path(), .tensor = src.name});
      return;
    }
    const Gather& gather = gathers_[unit.gather];
    if (gather.scatter) {
      scatter_unit(unit, gather, file);
      return;
    }
    if (bounce.size() < unit.bytes) bounce.resize(unit.bytes);
    format::pread_exact(file.fd(), {bounce.data(), unit.bytes}, unit.file_offset,
                        {.file = file.path(), .tensor = src.name});
    const uint64_t src_esize = dtype_bits(src.dtype) / 8;
    const uint64_t row_bytes = src.cols * src_esize;
    for (const Consumer& c : gather.consumers) {
      const uint64_t width = c.col_end - c.col_begin;
      const uint64_t dst_row_bytes = width * dtype_bits(c.dtype) / 8;
      std::byte* dst = c.dst + (unit.row_begin - gather.row_begin) * dst_row_bytes;
      const uint64_t rows = unit.row_end - unit.row_begin;
      if (width == src.cols) {  // whole rows: one call for the unit
        convert_values(src.dtype, bounce.data(), c.dtype, dst, rows * width, c.divisor, scratch);
        continue;
      }
      for (uint64_t r = 0; r < rows; ++r) {
        convert_values(src.dtype, bounce.data() + r * row_bytes + c.col_begin * src_esize, c.dtype,
                       dst + r * dst_row_bytes, width, c.divisor, scratch);
      }
    }
  }

  void plan_scatter(Gather& gather) const {
    const PlanSource& src = plan_.sources[gather.source];
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
      if (c.dtype != src.dtype || c.divisor != 1) return;
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
    gather.scatter = covered == src.cols;
  }

  // One kernel copy per byte: rows land in their consumers through preadv, no bounce buffer.
  void scatter_unit(const Unit& unit, const Gather& gather, const SafetensorsFile& file) const {
    const PlanSource& src = plan_.sources[gather.source];
    const uint64_t esize = dtype_bits(src.dtype) / 8;
    const uint64_t rows = unit.row_end - unit.row_begin;
    const uint64_t first = unit.row_begin - gather.row_begin;
    std::vector<iovec> segments;
    segments.reserve(rows * gather.tiles.size());
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint32_t t : gather.tiles) {
        const Consumer& c = gather.consumers[t];
        const uint64_t row_bytes = (c.col_end - c.col_begin) * esize;
        segments.push_back({c.dst + (first + r) * row_bytes, row_bytes});
      }
    }
    format::preadv_exact(file.fd(), segments, unit.file_offset,
                         {.file = file.path(), .tensor = src.name});
    for (const auto& [replica, tile] : gather.replicas) {
      const Consumer& c = gather.consumers[replica];
      const uint64_t row_bytes = (c.col_end - c.col_begin) * esize;
      std::memcpy(c.dst + first * row_bytes, gather.consumers[tile].dst + first * row_bytes,
                  rows * row_bytes);
    }
  }

  const Checkpoint& ckpt_;
  const Plan& plan_;
  std::vector<Unit> units_;
  std::vector<Gather> gathers_;
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, uint32_t> gather_ids_;
  uint64_t total_ = 0;
};

// Post-processes the listed modules of every rank, in parallel over (rank, module).
void postprocess_ranks(const Plan& plan, std::vector<RankWeights>& ranks, const std::vector<bool>& modules,
                       int threads) {
  std::vector<uint32_t> list;
  for (uint32_t m = 0; m < plan.modules.size(); ++m) {
    if ((modules.empty() || modules[m]) && plan.modules[m].post != PostProcess::kNone) list.push_back(m);
  }
  for (RankWeights& weights : ranks) {
    weights.processed.resize(plan.modules.size(), 0);
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (modules.empty() || modules[m]) weights.processed[m] = 0;  // new bytes: not processed yet
    }
  }
  parallel_for(ranks.size() * list.size(), threads, [&](size_t i, int) {
    postprocess_modules(plan, ranks[i / list.size()], {list[i % list.size()]});
  });
  for (RankWeights& weights : ranks) {
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (modules.empty() || modules[m]) weights.processed[m] = 1;  // nothing to do counts as done
    }
  }
}

void fill_ranks(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                const std::vector<bool>& modules, const LoadOptions& options, LoadStats* stats) {
  auto start = std::chrono::steady_clock::now();
  Executor executor(ckpt, plan);
  // Every piece, or those of the modules `modules` marks.
  const PieceSelector select = [&](int, const PlanParam& param, const PlanPiece&) {
    return modules.empty() || modules[param.module];
  };
  for (RankWeights& weights : ranks) {
    executor.add_selected(plan.ranks[static_cast<size_t>(weights.rank)], weights.buffer.data(), select);
  }
  executor.finish();
  executor.run(options.threads, options.progress);
  const double copy = seconds_since(start);
  start = std::chrono::steady_clock::now();
  postprocess_ranks(plan, ranks, modules, options.threads);
  if (stats != nullptr) {
    stats->seconds_copy = copy;
    stats->seconds_postprocess = seconds_since(start);
    stats->bytes_read = executor.total_bytes();
    stats->bytes_written = 0;
    for (const RankWeights& weights : ranks) stats->bytes_written += weights.buffer.size();
  }
}

void check_rank(const Plan& plan, int r) {
  if (r < 0 || r >= static_cast<int>(plan.ranks.size())) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("rank {} is outside the layout of {} ranks", r, plan.ranks.size()));
  }
}

}  // namespace

std::vector<RankWeights> load_ranks(const Checkpoint& ckpt, const Plan& plan,
                                    const LoadOptions& options, LoadStats* stats) {
  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (const RankPlan& rank : plan.ranks) ranks.push_back(rank.rank);
  }
  for (int r : ranks) check_rank(plan, r);
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankWeights> out;
  for (int r : ranks) {
    out.push_back({r, AlignedBuffer(plan.ranks[static_cast<size_t>(r)].bytes), {}});
  }
  const double allocate = seconds_since(start);
  fill_ranks(ckpt, plan, out, {}, options, stats);
  if (stats != nullptr) stats->seconds_allocate = allocate;
  return out;
}

void load_into(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
               const std::vector<bool>& modules, const LoadOptions& options, LoadStats* stats) {
  if (!modules.empty() && modules.size() != plan.modules.size()) {
    throw Error(ErrorKind::kInvalidArgument, "the module filter does not fit the plan",
                {.expected = fmt::format("{} modules", plan.modules.size()),
                 .found = fmt::format("{}", modules.size())});
  }
  for (const RankWeights& weights : ranks) {
    check_rank(plan, weights.rank);
    const uint64_t bytes = plan.ranks[static_cast<size_t>(weights.rank)].bytes;
    if (weights.buffer.size() != bytes) {
      throw Error(ErrorKind::kInvalidArgument, "the rank buffer does not fit the plan",
                  {.field = fmt::format("rank {}", weights.rank), .expected = fmt::format("{} bytes", bytes),
                   .found = fmt::format("{} bytes", weights.buffer.size())});
    }
  }
  fill_ranks(ckpt, plan, ranks, modules, options, stats);
}

uint64_t read_pieces(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                     const PieceSelector& select, int threads, const std::atomic<bool>* cancel) {
  Executor executor(ckpt, plan);
  for (RankWeights& weights : ranks) {
    check_rank(plan, weights.rank);
    executor.add_selected(plan.ranks[static_cast<size_t>(weights.rank)], weights.buffer.data(), select);
  }
  executor.finish();
  executor.run(threads, {}, cancel);
  return executor.total_bytes();
}

TensorView param_view(const RankWeights& weights, const PlanParam& param) {
  return {param.dtype, param.shape, weights.buffer.span().subspan(param.offset, param.nbytes)};
}

}  // namespace shardload
