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

#include "poke.h"
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

}  // namespace shardload::testing
