#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/plan.h"
#include "shardload/tensor.h"

namespace shardload {

// One rank's weights: a single aligned allocation with every parameter at its plan offset.
struct RankWeights {
  int rank = 0;
  AlignedBuffer buffer;
};

struct LoadOptions {
  int threads = 0;         // 0: one per core
  std::vector<int> ranks;  // empty: every rank of the plan
  // Called from the loading threads with bytes done and bytes total (a progress bar); may be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct LoadStats {
  uint64_t bytes_read = 0;     // checkpoint bytes read
  uint64_t bytes_written = 0;  // rank bytes written (including zero padding)
  double seconds_allocate = 0;
  double seconds_copy = 0;
};

// Executes a plan: allocates each requested rank and fills every parameter, casting dtypes in the same pass
// as the copy, with a pool of threads. Throws Error (I/O, short reads) naming the file and tensor.
std::vector<RankWeights> load_ranks(const Checkpoint& checkpoint, const Plan& plan,
                                    const LoadOptions& options = {}, LoadStats* stats = nullptr);

// A view of one parameter of a loaded rank.
TensorView param_view(const RankWeights& weights, const PlanParam& param);

// XXH3-64 of a byte range, as 16 lower-case hex digits.
std::string xxh3_hex(std::span<const std::byte> bytes);

}  // namespace shardload
