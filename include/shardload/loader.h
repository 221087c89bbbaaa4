#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/plan.h"
#include "shardload/tensor.h"

namespace shardload {

// One rank's weights: a single aligned allocation with every parameter at its plan offset.
struct RankWeights {
  int rank = 0;
  AlignedBuffer buffer;
  // Per module of the plan: 1 once its post-processing has run on the bytes now in the buffer. A module is
  // post-processed only when it is 0, so loading some modules again never processes the others twice.
  std::vector<uint8_t> processed;
};

// How checkpoint bytes are read.
enum class IoMode {
  kAuto,    // when most of the files' bytes are in the page cache: kMmap if they map as huge
            // pages, else kPread; otherwise kDirect (kPread where the file system refuses O_DIRECT)
  kPread,   // through the page cache: preadv straight into the rank buffers, one request per file run
  kMmap,    // copies each read out of a mapping of its file range (a file truncated meanwhile: Error)
  kDirect,  // O_DIRECT with io_uring: aligned reads, several in flight per thread, no page cache
};
// Each read path with its name (`--io`), in one table for the loader's reports and the command line.
inline constexpr std::pair<IoMode, const char*> kIoModeNames[] = {
    {IoMode::kAuto, "auto"}, {IoMode::kPread, "pread"}, {IoMode::kMmap, "mmap"},
    {IoMode::kDirect, "direct"}};
const char* io_mode_name(IoMode mode);

struct LoadOptions {
  int threads = 0;         // 0: one per core
  IoMode io = IoMode::kAuto;
  std::vector<int> ranks;  // empty: every rank of the plan
  // Called from the loading threads, concurrently, with bytes done and bytes total (a progress bar);
  // calls may arrive out of order (one thread's larger `done` before another's smaller one). May be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct LoadStats {
  uint64_t bytes_read = 0;     // checkpoint bytes read
  uint64_t bytes_written = 0;  // rank bytes written (including zero padding)
  double seconds_allocate = 0;
  double seconds_copy = 0;
  double seconds_postprocess = 0;
  IoMode io = IoMode::kAuto;   // the read path used
  uint64_t read_requests = 0;  // reads issued (neighbouring small tensors share one)
};

// Executes a plan: allocates each requested rank and fills every parameter, casting dtypes in the same pass
// as the copy, with a pool of threads. Throws Error (I/O, short reads) naming the file and tensor.
std::vector<RankWeights> load_ranks(const Checkpoint& checkpoint, const Plan& plan,
                                    const LoadOptions& options = {}, LoadStats* stats = nullptr);

// One aligned, zero-filled allocation per rank of `ranks`, of the size the plan gives it (the
// buffers load_ranks fills). Throws Error(kInvalidArgument) for a rank outside the plan.
std::vector<RankWeights> allocate_ranks(const Plan& plan, const std::vector<int>& ranks);

// Loads the modules for which `modules[m]` is true (all when empty) into ranks already loaded with this plan,
// in place: no buffer moves or changes size. Each module loaded is post-processed once, after all its tensors
// arrived; every other module keeps its bytes. Throws Error(kInvalidArgument) when a buffer does not fit the
// plan.
void load_into(const Checkpoint& checkpoint, const Plan& plan, std::vector<RankWeights>& ranks,
               const std::vector<bool>& modules, const LoadOptions& options = {}, LoadStats* stats = nullptr);

// Chooses the pieces a partial read takes: called once per (rank, parameter, piece).
using PieceSelector = std::function<bool(int rank, const PlanParam& param, const PlanPiece& piece)>;

// Reads the selected pieces of `plan` into `ranks` (each at its plan offset), converting dtypes on the way,
// without post-processing and without touching `processed`; the staging step of an update. Checks `cancel`
// between work items and throws Error(kCancelled) when it is set. Returns the checkpoint bytes read.
uint64_t read_pieces(const Checkpoint& checkpoint, const Plan& plan, std::vector<RankWeights>& ranks,
                     const PieceSelector& select, int threads = 0,
                     const std::atomic<bool>* cancel = nullptr, IoMode io = IoMode::kAuto);

enum class PostprocessMode {
  kOnce,        // skip modules already processed (what every load does)
  kForceAgain,  // run even on processed modules: only for tests that show what a second pass would break
};

// Post-processes the listed modules of a loaded rank in place (FP8 requantization and scale
// merging, dynamic FP8 quantization; docs/layout.md) and marks them processed. Every FP8
// scale read from the checkpoint (per-tensor weight and input scales, block FP8 weight_scale_inv
// grids) must be positive and finite: otherwise Error(kInvalidArgument) naming the checkpoint
// tensor, the block, the expert and, with `checkpoint` (the one the plan was made from), the file.
void postprocess_modules(const Plan& plan, RankWeights& weights,
                         const std::vector<uint32_t>& modules,
                         PostprocessMode mode = PostprocessMode::kOnce,
                         const Checkpoint* checkpoint = nullptr);

// A view of one parameter of a loaded rank.
TensorView param_view(const RankWeights& weights, const PlanParam& param);

// XXH3-64 of a byte range, as 16 lower-case hex digits.
std::string xxh3_hex(std::span<const std::byte> bytes);

}  // namespace shardload
