// Loads ranks: allocates them, runs the executor (load/executor.h) over their pieces and
// post-processes what it filled.
#include "shardload/loader.h"

#include <fmt/format.h>

#include <chrono>

#include "core/parallel_for.h"
#include "core/plural.h"
#include "core/seconds_since.h"
#include "load/executor.h"
#include "load/postprocess_ranks.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using load::Executor;
using load::postprocess_ranks;

void fill_ranks(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                const std::vector<bool>& modules, const LoadOptions& options, LoadStats* stats) {
  auto start = std::chrono::steady_clock::now();
  Executor executor(ckpt, plan);
  // Every piece, or those of the modules `modules` marks.
  const PieceSelector select = [&](int, const PlanParam& param, const PlanPiece&) {
    return modules.empty() || modules[param.module];
  };
  executor.add_ranks(ranks, select);
  executor.finish();
  const IoMode io = executor.run(options.threads, options.io, options.progress);
  const double copy = seconds_since(start);
  start = std::chrono::steady_clock::now();
  postprocess_ranks(ckpt, plan, ranks, modules, options.threads);
  if (stats != nullptr) {
    stats->seconds_copy = copy;
    stats->io = io;
    stats->read_requests = executor.job_count();
    stats->seconds_postprocess = seconds_since(start);
    stats->bytes_read = executor.total_bytes();
    stats->bytes_written = 0;
    for (const RankWeights& weights : ranks) stats->bytes_written += weights.buffer.size();
  }
}

void check_rank(const Plan& plan, int r) {
  if (r < 0 || r >= static_cast<int>(plan.ranks.size())) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("rank {} is outside the layout of {}", r, count_of(plan.ranks.size(), "rank")));
  }
}

}  // namespace

const char* io_mode_name(IoMode mode) {
  for (const auto& [known, name] : kIoModeNames) {
    if (known == mode) return name;
  }
  return "?";
}

std::vector<RankWeights> allocate_ranks(const Plan& plan, const std::vector<int>& ranks) {
  for (int r : ranks) check_rank(plan, r);
  std::vector<RankWeights> out;
  for (int r : ranks) {
    out.push_back({r, AlignedBuffer(plan.ranks[static_cast<size_t>(r)].bytes), {}});
  }
  return out;
}

std::vector<RankWeights> load_ranks(const Checkpoint& ckpt, const Plan& plan,
                                    const LoadOptions& options, LoadStats* stats) {
  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (const RankPlan& rank : plan.ranks) ranks.push_back(rank.rank);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankWeights> out = allocate_ranks(plan, ranks);
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
                  {.field = fmt::format("rank {}", weights.rank),
                   .expected = fmt::format("{} bytes", bytes),
                   .found = fmt::format("{} bytes", weights.buffer.size())});
    }
  }
  fill_ranks(ckpt, plan, ranks, modules, options, stats);
}

uint64_t read_pieces(const Checkpoint& ckpt, const Plan& plan, std::vector<RankWeights>& ranks,
                     const PieceSelector& select, int threads, const std::atomic<bool>* cancel,
                     IoMode io) {
  for (const RankWeights& weights : ranks) check_rank(plan, weights.rank);
  Executor executor(ckpt, plan);
  executor.add_ranks(ranks, select);
  executor.finish();
  executor.run(threads, io, {}, cancel);
  return executor.total_bytes();
}

TensorView param_view(const RankWeights& weights, const PlanParam& param) {
  return {param.dtype, param.shape, weights.buffer.span().subspan(param.offset, param.nbytes)};
}

}  // namespace shardload
