#include "device/scatter_uploader.h"

#include <fmt/format.h>

#include <algorithm>

#include "shardload/error.h"

namespace shardload::device {

ScatterUploader::ScatterUploader(Uploader& inner, std::vector<ScatteredParam> params)
    : inner_(inner), params_(std::move(params)) {
  for (size_t i = 1; i < params_.size(); ++i) {
    if (params_[i].offset < params_[i - 1].offset + params_[i - 1].bytes) {
      throw Error(ErrorKind::kInternal, "scattered parameters overlap or are out of order",
                  {.found = fmt::format("offset {} after {} + {}", params_[i].offset,
                                        params_[i - 1].offset, params_[i - 1].bytes)});
    }
  }
}

void ScatterUploader::upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) {
  if (target != 0) {
    throw Error(ErrorKind::kInternal, "a scatter upload names another rank than its own",
                {.found = fmt::format("target {}", target)});
  }
  const uint64_t end = offset + bytes;
  // The first parameter that ends after `offset`; padding between parameters goes nowhere.
  auto it = std::upper_bound(
      params_.begin(), params_.end(), offset,
      [](uint64_t at, const ScatteredParam& p) { return at < p.offset + p.bytes; });
  for (; it != params_.end() && it->offset < end; ++it) {
    if (it->target < 0) continue;
    const uint64_t lo = std::max(offset, it->offset);
    const uint64_t hi = std::min(end, it->offset + it->bytes);
    if (lo >= hi) continue;
    inner_.upload(static_cast<size_t>(it->target), lo - it->offset, src + (lo - offset), hi - lo);
    scattered_ += hi - lo;
  }
}

}  // namespace shardload::device
