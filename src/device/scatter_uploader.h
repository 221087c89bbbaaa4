// The staging ring uploads a rank's bytes at the rank's offsets, as one allocation holds them
// (RankWeights, a GPU buffer). An engine holds the same parameters as tensors of its own, one
// allocation each: ScatterUploader cuts each upload at the parameters' bounds and hands every
// piece to an inner Uploader whose targets are those tensors, so the rank is never whole in host
// memory (only the ring's windows are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/staging_ring.h"

namespace shardload::device {

// A parameter's bytes in the rank, and the inner target that receives them (-1: none; its bytes are
// read and post-processed with its module, then dropped).
struct ScatteredParam {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  long target = -1;
};

class ScatterUploader : public Uploader {
 public:
  // `params` at increasing, non-overlapping offsets (a rank plan's order); one rank (target 0).
  ScatterUploader(Uploader& inner, std::vector<ScatteredParam> params);
  std::byte* allocate_staging(size_t bytes) override { return inner_.allocate_staging(bytes); }
  void free_staging(std::byte* staging) noexcept override { inner_.free_staging(staging); }
  void upload(size_t target, uint64_t offset, const std::byte* src, uint64_t bytes) override;
  uint64_t mark() override { return inner_.mark(); }
  void wait(uint64_t marker) override { inner_.wait(marker); }
  uint64_t bytes_scattered() const { return scattered_; }

 private:
  Uploader& inner_;
  std::vector<ScatteredParam> params_;
  uint64_t scattered_ = 0;
};

}  // namespace shardload::device
