// Shared by the reload tests: tiny checkpoints on disk, byte snapshots of live weights and a fresh
// load to compare against (the reference is a full load of the target checkpoint, not the update
// code).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/reload.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload::testing {

inline std::string make_model(const TempDir& dir, const std::string& arch, uint64_t seed,
                              const std::string& quant = "none", const std::string& activation = {},
                              int experts = -1) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file(arch + "-" + quant + activation + "-" + std::to_string(seed) + "-" +
                         std::to_string(experts));
  options.seed = seed;
  options.quant = quant;
  options.activation_scheme = activation;
  options.experts = experts;
  make_tiny(options);
  return options.out;
}

inline ParallelConfig layout(int tp, int ep, bool dynamic_fp8 = false) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  parallel.quantize_fp8 = dynamic_fp8;
  return parallel;
}

using Snapshot = std::vector<std::vector<std::byte>>;

inline Snapshot snapshot(const LiveModel& live) {
  Snapshot out;
  for (const RankWeights& w : live.ranks)
    out.emplace_back(w.buffer.data(), w.buffer.data() + w.buffer.size());
  return out;
}

inline std::vector<const std::byte*> addresses(const LiveModel& live) {
  std::vector<const std::byte*> out;
  for (const RankWeights& w : live.ranks) out.push_back(w.buffer.data());
  return out;
}

inline bool param_equals(const Snapshot& snap, size_t rank, const PlanParam& p,
                         const LiveModel& live) {
  return std::memcmp(snap[rank].data() + p.offset, live.ranks[rank].buffer.data() + p.offset,
                     p.nbytes) == 0;
}

// Every byte of every rank equals the snapshot; names the first parameter that differs.
inline void expect_unchanged(const Snapshot& before, const LiveModel& live) {
  ASSERT_EQ(before.size(), live.ranks.size());
  for (size_t r = 0; r < before.size(); ++r) {
    for (const PlanParam& p : live.plan.ranks[r].params) {
      ASSERT_TRUE(param_equals(before, r, p, live)) << "rank " << r << " " << p.name << " changed";
    }
    ASSERT_EQ(std::memcmp(before[r].data(), live.ranks[r].buffer.data(), before[r].size()), 0)
        << "rank " << r;
  }
}

// Overwrites element `index` of float32 checkpoint tensor `tensor` of `model` in place (a damaged
// scale); returns the file that holds it.
inline std::string poke_float(const std::string& model, const std::string& tensor, uint64_t index,
                              float value) {
  const Checkpoint ckpt = Checkpoint::open(model);
  const Checkpoint::Entry& entry = ckpt.at(tensor);
  const SafetensorsFile& file = ckpt.files()[entry.file];
  EXPECT_EQ(entry.info->dtype, DType::kF32) << tensor;
  EXPECT_LT(index * 4, entry.info->nbytes()) << tensor;
  const int fd = ::open(file.path().c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << file.path();
  const off_t at = static_cast<off_t>(file.header().data_start + entry.info->begin + index * 4);
  EXPECT_EQ(::pwrite(fd, &value, 4, at), 4);
  ::close(fd);
  return file.path();
}

}  // namespace shardload::testing
