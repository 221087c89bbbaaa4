#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardload {

// One memcpy of a larger copy.
struct ByteCopy {
  std::byte* dst;
  const std::byte* src;
  uint64_t bytes;
};

// The copies cut into one contiguous share of the bytes per thread (`threads`, 0: one per core), as a
// plain parallel memcpy splits them; small chunks handed out in turn made each thread's stream jump, and
// a commit copying 8 MiB chunks so ran at 0.57 of that memcpy on 2 cores, in shares at 0.77
// (bench/reload_bench, tp 1, interleaved). Shares are whole pages and at least 8 MiB.
std::vector<std::vector<ByteCopy>> copy_shares(const std::vector<ByteCopy>& copies, int threads);
// Runs the shares, one work item each, on `threads` threads. memcpy cannot fail: once started, every
// byte is copied.
void run_copy_shares(const std::vector<std::vector<ByteCopy>>& shares, int threads);

inline void parallel_copy(const std::vector<ByteCopy>& copies, int threads) {
  run_copy_shares(copy_shares(copies, threads), threads);
}

}  // namespace shardload
