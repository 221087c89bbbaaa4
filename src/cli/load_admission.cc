#include "cli/load_admission.h"

#include <sys/resource.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/admission.h"
#include "core/parallel_for.h"
#include "core/plural.h"
#include "load/executor.h"

namespace shardload::cli {
namespace {

// The stack a new thread gets: the soft stack limit (glibc's default for pthreads).
uint64_t thread_stack_bytes() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 8 << 20;
  return limit.rlim_cur;
}

}  // namespace

void admit_load(const Plan& plan, const std::vector<int>& ranks, int threads, IoMode io) {
  uint64_t buffers = 0;
  size_t count = 0;
  for (const RankPlan& rank : plan.ranks) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), rank.rank) == ranks.end()) continue;
    buffers += rank.bytes;
    ++count;
  }
  // What the readers work in beside the buffers (load/executor.h): through the page cache each maps
  // or bounces up to a whole checkpoint tensor; O_DIRECT readers (at most kDirectThreads) keep
  // kDirectDepth slots of a work item or a whole tensor each. Small beside a real model's buffers,
  // not beside a tiny one's. `auto` may take either path.
  uint64_t largest = 0;
  for (const PlanSource& source : plan.sources)
    largest = std::max(largest, shape_nbytes(source.shape, source.dtype));
  const int readers = threads > 0 ? threads : default_thread_count();
  const uint64_t cached = static_cast<uint64_t>(readers) * largest;
  const uint64_t direct = static_cast<uint64_t>(std::min(readers, load::kDirectThreads)) *
                          load::kDirectDepth * std::max(load::kDirectChunk, largest);
  const uint64_t working =
      static_cast<uint64_t>(readers) * thread_stack_bytes() +
      (io == IoMode::kDirect ? direct : io == IoMode::kAuto ? std::max(cached, direct) : cached);
  admit_memory(buffers + working,
               fmt::format("the buffers of {} ({}) and the working room of {} ({})",
                           count_of(count, "rank"), bytes_text(buffers),
                           count_of(static_cast<uint64_t>(readers), "reader thread"),
                           bytes_text(working)));
}

}  // namespace shardload::cli
