#include "core/parallel_copy.h"

#include <algorithm>
#include <cstring>

#include "core/parallel_for.h"
#include "shardload/tensor.h"

namespace shardload {

std::vector<std::vector<ByteCopy>> copy_shares(const std::vector<ByteCopy>& copies, int threads) {
  constexpr uint64_t kMinShare = uint64_t{8} << 20;
  if (threads <= 0) threads = default_thread_count();
  uint64_t total = 0;
  for (const ByteCopy& copy : copies) total += copy.bytes;
  const uint64_t share = std::max<uint64_t>(
      kMinShare, (total / static_cast<uint64_t>(threads) + kPageBytes - 1) / kPageBytes * kPageBytes);
  std::vector<std::vector<ByteCopy>> shares(1);
  uint64_t filled = 0;
  for (const ByteCopy& copy : copies) {
    for (uint64_t at = 0; at < copy.bytes;) {
      if (filled == share) {
        shares.emplace_back();
        filled = 0;
      }
      const uint64_t n = std::min(share - filled, copy.bytes - at);
      shares.back().push_back({copy.dst + at, copy.src + at, n});
      filled += n;
      at += n;
    }
  }
  return shares;
}

void run_copy_shares(const std::vector<std::vector<ByteCopy>>& shares, int threads) {
  parallel_for(shares.size(), threads, [&](size_t i, int) {
    for (const ByteCopy& copy : shares[i]) std::memcpy(copy.dst, copy.src, copy.bytes);
  });
}

}  // namespace shardload
