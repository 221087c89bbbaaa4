// Data-parallel attention layouts (docs/layout.md, "Data-parallel attention"), loaded: every
// tensor of rank G equals the same tensor of the plain layout of its group's scope: rank G of --tp T
// (scope world, and routed experts), rank G % A of --tp A (scope attention), rank 0 of --tp 1
// (replicated). Every MoE family and Llama, bf16, static FP8, block FP8 and dynamic FP8, under SGLang's
// defaults at --dp 2 and --dp 4, --enable-dp-lm-head, --moe-dense-tp-size 1, --dp-style vllm and DeepEP.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../shard/shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"

namespace shardload {
namespace {

using testing::TempDir;

struct Model {
  std::string arch;
  std::string quant;  // none, fp8, fp8-block, dynamic (none + --quantization fp8)
};

void PrintTo(const Model& m, std::ostream* os) { *os << m.arch << " " << m.quant; }

std::string model_name(const ::testing::TestParamInfo<Model>& info) {
  std::string quant = info.param.quant;
  std::replace(quant.begin(), quant.end(), '-', '_');
  return info.param.arch + "_" + quant;
}

// A layout under test, with a name for the failure messages.
struct DpLayout {
  std::string name;
  ParallelConfig config;
};

bool is_moe(const std::string& arch) { return arch != "llama"; }

// The layouts a model is checked under. The tiny block-FP8 models are sized for tp <= 4 (whole 128-blocks)
// and have 4 experts; the others take tp 8 and have 8 experts.
std::vector<DpLayout> layouts_for(const Model& m) {
  const bool block = m.quant == "fp8-block";
  const int tp = block ? 4 : 8;
  const int ep = is_moe(m.arch) ? (block ? 4 : 2) : 1;
  const auto base = [&](int dp) {
    ParallelConfig c;
    c.tp = tp;
    c.ep = ep;
    c.dp = dp;
    if (m.quant == "dynamic") c.quantize_fp8 = true;
    return c;
  };
  std::vector<DpLayout> out;
  out.push_back({"sglang dp 2", base(2)});
  out.push_back({"sglang dp 4", base(4)});
  ParallelConfig lm_head = base(2);
  lm_head.dp_lm_head = true;
  out.push_back({"dp 2 --enable-dp-lm-head", lm_head});
  ParallelConfig dense = base(4);
  dense.replicate_dense_mlp = true;
  out.push_back({"dp 4 --moe-dense-tp-size 1", dense});
  ParallelConfig vllm = base(2);
  vllm.dp_style = DpStyle::kVllm;
  out.push_back({"dp 2 --dp-style vllm", vllm});
  ParallelConfig divided = base(4);
  divided.row_bias = RowBias::kDivided;
  divided.dp_style = DpStyle::kVllm;
  out.push_back({"dp 4 --dp-style vllm --row-bias divided", divided});
  if (is_moe(m.arch)) {
    ParallelConfig deepep = base(tp);  // --moe-a2a-backend deepep: EP over all ranks, shared replicated
    deepep.ep = block ? 4 : 8;
    deepep.split_shared_experts = false;
    deepep.replicate_dense_mlp = true;
    out.push_back({"dp T deepep --moe-dense-tp-size 1", deepep});
    ParallelConfig redundant = base(2);
    redundant.redundant_experts = ep;  // a whole slot more per EP rank
    out.push_back({"dp 2 redundant experts", redundant});
  }
  return out;
}

// The plain layout (no --dp) of `size` ranks that a scope stands for; routed experts keep the layout's
// EP only in the world reference, the others hold them in whatever way their size allows.
ParallelConfig plain(const ParallelConfig& dp, int size) {
  ParallelConfig c;
  c.tp = size;
  c.ep = size == dp.tp ? dp.ep : 1;
  if (size == dp.tp) c.redundant_experts = dp.redundant_experts;
  c.row_bias = dp.row_bias;
  c.split_shared_experts = dp.split_shared_experts;
  c.dtype = dp.dtype;
  c.quantize_fp8 = dp.quantize_fp8;
  return c;
}

struct Loaded {
  Plan plan;
  std::vector<RankWeights> ranks;
};

Loaded load(const Checkpoint& ckpt, const ParallelConfig& config) {
  Loaded out{make_plan(ckpt, config), {}};
  LoadStats stats;
  out.ranks = load_ranks(ckpt, out.plan, {}, &stats);
  // Many ranks hold the same attention and replicated bytes: each checkpoint byte is read once.
  uint64_t planned = 0;
  for (const PlanSource& source : out.plan.sources) planned += shape_nbytes(source.shape, source.dtype);
  EXPECT_EQ(stats.bytes_read, planned) << "tp " << config.tp << " dp " << config.dp;
  return out;
}

const PlanParam* find_param(const RankPlan& rank, const std::string& name) {
  for (const PlanParam& p : rank.params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

class DpScopes : public ::testing::TestWithParam<Model> {
 protected:
  static std::string make_model(const TempDir& dir, const Model& m) {
    const std::string path = dir.file(m.arch);
    make_tiny({.arch = m.arch,
               .out = path,
               .seed = testing::test_seed(),
               .quant = m.quant == "dynamic" ? "none" : m.quant});
    return path;
  }
};

TEST_P(DpScopes, EachRankHoldsThePlainLayoutOfItsScope) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, GetParam()));
  for (const DpLayout& layout : layouts_for(GetParam())) {
    SCOPED_TRACE(layout.name);
    const ParallelConfig& config = layout.config;
    const Loaded dp = load(ckpt, config);
    const int a = config.attention_tp();
    const Loaded world = load(ckpt, plain(config, config.tp));
    const Loaded attention = load(ckpt, plain(config, a));
    const Loaded whole = load(ckpt, plain(config, 1));
    std::map<std::string, int> scopes_seen;
    for (const RankPlan& rank : dp.plan.ranks) {
      EXPECT_EQ(rank.dp_rank, rank.rank / a);
      EXPECT_EQ(rank.attention_rank, rank.rank % a);
      const RankWeights& weights = dp.ranks[static_cast<size_t>(rank.rank)];
      size_t exported = 0;
      for (const PlanParam& param : rank.params) {
        if (!param.exported()) continue;
        ++exported;
        const ParamGroup group = dp.plan.modules[param.module].group;
        const Scope scope = config.scope(group);
        ++scopes_seen[fmt::format("{}:{}", group_name(group), scope_name(scope))];
        const Loaded& ref = scope == Scope::kWorld       ? world
                            : scope == Scope::kAttention ? attention
                                                         : whole;
        const int ref_rank = scope == Scope::kWorld       ? rank.rank
                             : scope == Scope::kAttention ? rank.rank % a
                                                          : 0;
        const PlanParam* expected = find_param(ref.plan.ranks[static_cast<size_t>(ref_rank)], param.name);
        ASSERT_NE(expected, nullptr) << param.name << " of rank " << rank.rank;
        ASSERT_EQ(param.shape, expected->shape) << param.name << " of rank " << rank.rank;
        ASSERT_EQ(param.dtype, expected->dtype) << param.name;
        const std::byte* got = weights.buffer.data() + param.offset;
        const std::byte* want = ref.ranks[static_cast<size_t>(ref_rank)].buffer.data() + expected->offset;
        EXPECT_EQ(std::memcmp(got, want, param.nbytes), 0)
            << param.name << " of rank " << rank.rank << " (" << group_name(group) << ", scope "
            << scope_name(scope) << ") differs from rank " << ref_rank << " of the plain layout";
      }
      // The same tensors as the plain layout of all T ranks: scopes change cuts, never names.
      size_t world_exported = 0;
      for (const PlanParam& p : world.plan.ranks[static_cast<size_t>(rank.rank)].params) {
        world_exported += p.exported() ? 1 : 0;
      }
      EXPECT_EQ(exported, world_exported) << "rank " << rank.rank;
    }
    // Each scope the layout names was exercised (a table that put every rule in one group would not
    // be caught otherwise).
    for (const ParamGroup group : {ParamGroup::kAttention, ParamGroup::kEmbedding}) {
      const std::string key = fmt::format("{}:{}", group_name(group), scope_name(config.scope(group)));
      EXPECT_GT(scopes_seen[key], 0) << key;
    }
    if (GetParam().arch == "llama" || GetParam().arch == "deepseek_v3") {
      const std::string key = fmt::format("dense_mlp:{}", scope_name(config.scope(ParamGroup::kDenseMlp)));
      EXPECT_GT(scopes_seen[key], 0) << key;
    }
  }
}

std::vector<Model> models() {
  std::vector<Model> out;
  for (const char* arch : {"llama", "qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3",
                           "deepseek_v32", "ernie4_5_moe", "glm4_moe", "minimax_m2", "qwen3_next",
                           "glm4_moe_lite", "glm_moe_dsa", "qwen3_5_moe"}) {
    for (const char* quant : {"none", "fp8", "fp8-block", "dynamic"}) out.push_back({arch, quant});
  }
  for (const char* arch : {"llama4", "gemma4"}) {  // no FP8 checkpoints
    for (const char* quant : {"none", "dynamic"}) out.push_back({arch, quant});
  }
  for (const char* quant : {"none", "mxfp4", "dynamic"}) out.push_back({"gpt_oss", quant});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, DpScopes, ::testing::ValuesIn(models()), model_name);

}  // namespace
}  // namespace shardload
