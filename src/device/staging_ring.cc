#include "device/staging_ring.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "load/direct_reader.h"
#include "load/executor.h"
#include "load/file_access.h"
#include "load/postprocess_ranks.h"
#include "shardload/error.h"

namespace shardload::device {
namespace {

constexpr uint64_t kSliceAlignment = kParamAlignment;  // keeps float views aligned as in the rank

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Per rank: the first param of each module boundary m (0..modules), and the rank byte there.
struct RankBounds {
  std::vector<size_t> first_param;
  std::vector<uint64_t> byte;
};

RankBounds rank_bounds(const Plan& plan, const RankPlan& rank) {
  const size_t modules = plan.modules.size();
  for (size_t i = 1; i < rank.params.size(); ++i) {
    const PlanParam& a = rank.params[i - 1];
    const PlanParam& b = rank.params[i];
    if (b.module < a.module || b.offset < a.offset + a.nbytes) {
      throw Error(ErrorKind::kInternal,
                  "a rank's parameters are not in module order at increasing offsets",
                  {.tensor = b.name, .field = fmt::format("rank {}", rank.rank)});
    }
  }
  RankBounds out;
  out.first_param.resize(modules + 1);
  out.byte.resize(modules + 1);
  size_t p = 0;
  for (size_t m = 0; m <= modules; ++m) {
    while (p < rank.params.size() && rank.params[p].module < m) ++p;
    out.first_param[m] = p;
    out.byte[m] = m == 0 ? 0 : (p < rank.params.size() ? rank.params[p].offset : rank.bytes);
  }
  out.byte[modules] = rank.bytes;
  if (modules == 0) out.first_param[0] = 0;
  return out;
}

// The executor writes param.offset + piece offsets from `base`: base stands for rank byte 0 so that
// rank byte `begin` lands at `staging` (arithmetic on integers: base lies outside the buffer).
std::byte* window_base(std::byte* staging, uint64_t begin) {
  return reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(staging) - begin);
}

// Zeroes the bytes of the slice no piece writes (alignment gaps, vocab padding, merged scales
// post-processing fills), as a host rank's zero-filled allocation has them.
void zero_gaps(const RankPlan& rank, const WindowSlice& slice, std::byte* staging) {
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  for (size_t i = slice.param_begin; i < slice.param_end; ++i) {
    const PlanParam& param = rank.params[i];
    for (const PlanPiece& piece : param.pieces) {
      const uint64_t at = param.offset + piece.dst_offset;
      covered.emplace_back(at, at + piece.dst_span_values() * dtype_bits(param.dtype) / 8);
    }
  }
  std::sort(covered.begin(), covered.end());
  uint64_t at = slice.begin;
  const auto zero = [&](uint64_t from, uint64_t to) {
    if (to > from) std::memset(staging + (from - slice.begin), 0, to - from);
  };
  for (const auto& [from, to] : covered) {
    zero(at, std::min(from, slice.end));
    at = std::max(at, to);
  }
  zero(at, slice.end);
}

// --io auto for the whole load, once (the executor would ask the page cache again per window).
IoMode resolve_io(const Checkpoint& ckpt, const Plan& plan, IoMode io) {
  if (io != IoMode::kAuto) return io;
  std::vector<uint32_t> files;
  for (const PlanSource& source : plan.sources) files.push_back(static_cast<uint32_t>(source.file));
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::vector<const SafetensorsFile*> used;
  for (uint32_t f : files) used.push_back(&ckpt.files()[f]);
  if (used.empty()) return IoMode::kPread;
  if (!load::mostly_cached(used)) {
    if (!load::open_direct_files(ckpt.files(), files, /*required=*/false).empty())
      return IoMode::kDirect;
    return IoMode::kPread;
  }
  return load::maps_as_huge_pages(used) ? IoMode::kMmap : IoMode::kPread;
}

// The ring's buffers; on the way out (an error included) waits for the uploads still reading them.
// The first buffer is allocated at once, the others on another thread while the first window is
// read: page-locking costs about as much per byte as a read from the page cache.
class Ring {
 public:
  Ring(Uploader& uploader, size_t depth, size_t bytes)
      : uploader_(uploader), buffers_(depth, nullptr), markers_(depth, 0) {
    buffers_[0] = uploader.allocate_staging(bytes);
    if (depth > 1) {
      rest_ = std::async(std::launch::async, [this, bytes] {
        for (size_t i = 1; i < buffers_.size(); ++i)
          buffers_[i] = uploader_.allocate_staging(bytes);
      });
    }
  }
  ~Ring() {
    try {
      if (rest_.valid()) rest_.get();
    } catch (...) {  // a failed allocation: reported by take() already, or not needed
    }
    try {
      drain();
    } catch (...) {  // an error is already on its way out
    }
    for (std::byte* b : buffers_) {
      if (b != nullptr) uploader_.free_staging(b);
    }
  }
  std::byte* take(size_t slot) {
    if (slot > 0 && rest_.valid()) rest_.get();
    if (markers_[slot] != 0) uploader_.wait(std::exchange(markers_[slot], 0));
    return buffers_[slot];
  }
  void uploaded(size_t slot) { markers_[slot] = uploader_.mark(); }
  void drain() {
    for (uint64_t& m : markers_) {
      if (m != 0) uploader_.wait(std::exchange(m, 0));
    }
  }

 private:
  Uploader& uploader_;
  std::vector<std::byte*> buffers_;
  std::vector<uint64_t> markers_;  // 0: nothing in flight
  std::future<void> rest_;         // the allocation of buffers 1..depth-1
};

}  // namespace

std::vector<Window> plan_windows(const Plan& plan, const std::vector<int>& ranks,
                                 uint64_t window_bytes, const std::vector<bool>& selected) {
  std::vector<RankBounds> bounds;
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(plan.ranks.size())) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} is outside the layout", r));
    }
    bounds.push_back(rank_bounds(plan, plan.ranks[static_cast<size_t>(r)]));
  }
  const uint32_t modules = static_cast<uint32_t>(plan.modules.size());
  const auto bytes_of = [&](uint32_t m0, uint32_t m1) {
    uint64_t total = 0;
    for (const RankBounds& b : bounds) total += align_up(b.byte[m1] - b.byte[m0], kSliceAlignment);
    return total;
  };
  if (!selected.empty() && selected.size() != modules) {
    throw Error(ErrorKind::kInvalidArgument, "the module filter does not fit the plan",
                {.expected = fmt::format("{} modules", modules),
                 .found = fmt::format("{}", selected.size())});
  }
  const auto taken = [&](uint32_t m) { return selected.empty() || selected[m]; };
  std::vector<Window> out;
  uint32_t m0 = 0;
  while (!selected.empty() && m0 < modules && !taken(m0)) ++m0;
  if (!selected.empty() && m0 == modules) return out;  // nothing selected
  do {
    uint32_t m1 = std::min(m0 + 1, modules);
    while (m1 < modules && taken(m1) && bytes_of(m0, m1 + 1) <= window_bytes) ++m1;
    Window& w = out.emplace_back();
    w.module_begin = m0;
    w.module_end = m1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankBounds& b = bounds[i];
      WindowSlice slice{i, b.first_param[m0], b.first_param[m1], b.byte[m0], b.byte[m1], w.bytes};
      if (slice.end > slice.begin) {
        w.slices.push_back(slice);
        w.bytes += align_up(slice.end - slice.begin, kSliceAlignment);
      }
    }
    m0 = m1;
    while (m0 < modules && !taken(m0)) ++m0;  // unselected modules keep their bytes: no window
  } while (m0 < modules);
  return out;
}

void load_through_ring(const Checkpoint& ckpt, const Plan& plan, const std::vector<int>& ranks,
                       Uploader& uploader, const RingOptions& options,
                       std::vector<std::vector<uint8_t>>& processed, RingStats* stats) {
  const std::vector<Window> windows =
      plan_windows(plan, ranks, options.window_bytes, options.modules);
  uint64_t largest = 0;
  uint64_t total = 0;
  for (const Window& w : windows) {
    largest = std::max(largest, w.bytes);
    for (const WindowSlice& s : w.slices) total += s.end - s.begin;
  }
  // A full load starts every flag at 0; a partial one keeps the flags of modules it does not load.
  if (options.modules.empty() || processed.size() != ranks.size()) {
    processed.assign(ranks.size(), std::vector<uint8_t>(plan.modules.size(), 0));
  }
  for (std::vector<uint8_t>& p : processed) {
    p.resize(plan.modules.size(), 0);
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (options.modules.empty() || options.modules[m]) p[m] = 0;  // new bytes: not processed yet
    }
  }
  RingStats local;
  local.io = resolve_io(ckpt, plan, options.io);
  if (windows.empty()) {
    if (stats != nullptr) *stats = RingStats{};
    return;
  }
  const size_t depth =
      std::min<size_t>(static_cast<size_t>(std::max(options.depth, 1)), windows.size());
  Ring ring(uploader, depth, std::max<uint64_t>(largest, 1));
  local.staging_bytes = depth * largest;
  const std::function<void(uint64_t, uint64_t)> no_progress;
  std::vector<load::Executor::SharedReader> readers;  // cold reads: slots faulted in once
  uint64_t done = 0;
  for (size_t k = 0; k < windows.size(); ++k) {
    const Window& w = windows[k];
    auto start = std::chrono::steady_clock::now();
    std::byte* staging = ring.take(k % depth);
    local.seconds_wait += seconds_since(start);
    if (w.slices.empty()) continue;

    start = std::chrono::steady_clock::now();
    load::Executor executor(ckpt, plan);
    executor.share_direct_readers(&readers);
    for (const WindowSlice& s : w.slices) {
      const RankPlan& rank = plan.ranks[static_cast<size_t>(ranks[s.target])];
      zero_gaps(rank, s, staging + s.staging_offset);
      executor.add_params(rank, s.param_begin, s.param_end,
                          window_base(staging + s.staging_offset, s.begin));
    }
    executor.finish();
    executor.run(options.threads, local.io, no_progress);
    local.bytes_read += executor.total_bytes();
    local.read_requests += executor.job_count();
    local.seconds_fill += seconds_since(start);

    start = std::chrono::steady_clock::now();
    std::vector<std::pair<size_t, uint32_t>> work;  // (slice, module) pairs to post-process
    for (size_t i = 0; i < w.slices.size(); ++i) {
      for (uint32_t m = w.module_begin; m < w.module_end; ++m) {
        if (plan.modules[m].needs_postprocess()) work.emplace_back(i, m);
      }
    }
    parallel_for(work.size(), options.threads, [&](size_t i, int) {
      const WindowSlice& s = w.slices[work[i].first];
      load::postprocess_modules_at(
          plan, ranks[s.target], window_base(staging + s.staging_offset, s.begin),
          processed[s.target], {work[i].second}, PostprocessMode::kOnce, &ckpt);
    });
    for (const WindowSlice& s : w.slices) {
      for (uint32_t m = w.module_begin; m < w.module_end; ++m) processed[s.target][m] = 1;
    }
    local.seconds_postprocess += seconds_since(start);

    for (const WindowSlice& s : w.slices) {
      uploader.upload(s.target, s.begin, staging + s.staging_offset, s.end - s.begin);
      local.bytes_uploaded += s.end - s.begin;
      done += s.end - s.begin;
    }
    ring.uploaded(k % depth);
    ++local.windows;
    if (options.progress) options.progress(done, total);
  }
  // Modules loaded that no rank holds a byte of still count as processed, as in load_into.
  for (std::vector<uint8_t>& p : processed) {
    for (uint32_t m = 0; m < plan.modules.size(); ++m) {
      if (options.modules.empty() || options.modules[m]) p[m] = 1;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  ring.drain();
  local.seconds_wait += seconds_since(start);
  if (stats != nullptr) *stats = local;
}

// ---------------------------------------------------------------------------------------------

struct HostUploader::State {
  struct Copy {
    size_t target;
    uint64_t offset;
    const std::byte* src;
    uint64_t bytes;
  };
  std::vector<std::span<std::byte>> targets;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Copy> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread worker;

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      const Copy copy = queue.front();
      queue.pop_front();
      lock.unlock();
      std::exception_ptr failed;
      if (copy.target >= targets.size() || copy.offset > targets[copy.target].size() ||
          copy.bytes > targets[copy.target].size() - copy.offset) {
        failed = std::make_exception_ptr(
            Error(ErrorKind::kInternal, "an upload runs past its destination",
                  {.field = fmt::format("target {}", copy.target),
                   .found = fmt::format("{} bytes at {}", copy.bytes, copy.offset)}));
      } else {
        std::memcpy(targets[copy.target].data() + copy.offset, copy.src, copy.bytes);
      }
      lock.lock();
      if (failed && !error) error = failed;
      ++completed;
      changed.notify_all();
    }
  }
};

HostUploader::HostUploader(std::vector<std::span<std::byte>> targets) : state_(new State) {
  state_->targets = std::move(targets);
  state_->worker = std::thread([s = state_] { s->run(); });
}

HostUploader::~HostUploader() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->changed.notify_all();
  state_->worker.join();
  delete state_;
}

std::byte* HostUploader::allocate_staging(size_t bytes) {
  void* p = std::aligned_alloc(4096, align_up(std::max<size_t>(bytes, 1), 4096));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

void HostUploader::free_staging(std::byte* staging) noexcept { std::free(staging); }

void HostUploader::upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) {
  std::lock_guard lock(state_->mutex);
  state_->queue.push_back({target, offset, src, bytes});
  ++state_->enqueued;
  state_->changed.notify_all();
}

uint64_t HostUploader::mark() {
  std::lock_guard lock(state_->mutex);
  return state_->enqueued;
}

void HostUploader::wait(uint64_t marker) {
  std::unique_lock lock(state_->mutex);
  state_->changed.wait(lock, [&] { return state_->completed >= marker; });
  if (state_->error) std::rethrow_exception(state_->error);
}

}  // namespace shardload::device
