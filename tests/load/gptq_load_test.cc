// GPTQ's and AWQ's input-major words as the loader fills them: each fused part's share of columns lands as a
// column block of the rank tensor, row after row (PlanPiece::dst_pitch), for make-tiny's llama (q, k and v of
// different widths, kv heads split and replicated) at tp 2 and tp 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/convert.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload::testing {
namespace {

class GptqLoad : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(GptqLoad, EachPartsColumnsLandAsAColumnBlock) {
  const auto& [tp, quant] = GetParam();
  TempDir tmp;
  const std::string model = tmp.file("model");
  make_tiny({.arch = "llama", .out = model, .seed = 11, .quant = quant});
  const Checkpoint ckpt = Checkpoint::open(model);
  ParallelConfig parallel;
  parallel.tp = tp;
  const Plan plan = make_plan(ckpt, parallel);
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan);
  const std::string layer = "model.layers.0.";
  const uint64_t kv_heads = plan.model.kv_heads;
  for (const std::string suffix : {"qweight", "scales", "qzeros"}) {
    for (int r = 0; r < tp; ++r) {
      const RankPlan& rank = plan.ranks[static_cast<size_t>(r)];
      const PlanParam* param = nullptr;
      for (const PlanParam& p : rank.params) {
        if (p.name == layer + "self_attn.qkv_proj." + suffix) param = &p;
      }
      ASSERT_NE(param, nullptr) << suffix;
      const TensorView view = param_view(ranks[static_cast<size_t>(r)], *param);
      const uint64_t esize = dtype_bits(param->dtype) / 8;
      const uint64_t rows = param->shape[0], cols = param->shape[1];
      uint64_t at = 0;  // the part's first column in the rank tensor
      for (const char part : {'q', 'k', 'v'}) {
        const Checkpoint::Entry& entry = ckpt.at(layer + "self_attn." + part + "_proj." + suffix);
        std::vector<std::byte> stored(entry.info->nbytes());
        ckpt.files()[entry.file].read(*entry.info, stored);
        ASSERT_EQ(entry.info->shape[0], rows) << suffix;
        const uint64_t source_cols = entry.info->shape[1];
        // q is split over the ranks; k and v by kv head (replicated where ranks outnumber the heads).
        const uint64_t shares = part == 'q' ? static_cast<uint64_t>(tp) : std::min<uint64_t>(tp, kv_heads);
        const uint64_t share = static_cast<uint64_t>(part == 'q' ? r : r * static_cast<int>(shares) / tp);
        const uint64_t width = source_cols / shares;
        for (uint64_t row = 0; row < rows; ++row) {
          const std::byte* got = view.data.data() + (row * cols + at) * esize;
          if (suffix == "scales") {  // F16 in the checkpoint, the model's BF16 on the rank: compare as floats
            for (uint64_t c = 0; c < width; ++c) {
              uint16_t half = 0, bf16 = 0;
              std::memcpy(&half, stored.data() + (row * source_cols + share * width + c) * 2, 2);
              std::memcpy(&bf16, got + c * 2, 2);
              float want = 0, have = 0;
              convert(DType::kF16, &half, DType::kF32, &want, 1);
              convert(DType::kBF16, &bf16, DType::kF32, &have, 1);
              EXPECT_EQ(have, want) << suffix << " rank " << r << " " << part << " row " << row << " col " << c;
            }
            continue;
          }
          EXPECT_EQ(std::memcmp(got, stored.data() + (row * source_cols + share * width) * esize, width * esize), 0)
              << suffix << " rank " << r << " " << part << " row " << row;
        }
        at += width;
      }
      EXPECT_EQ(at, cols) << suffix;
    }
  }
}

// GPTQ's words pack inputs, AWQ's outputs (a part's share is then whole words of its columns).
INSTANTIATE_TEST_SUITE_P(TensorParallel, GptqLoad,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("gptq", "awq")));

}  // namespace
}  // namespace shardload::testing
