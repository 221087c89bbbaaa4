// Hand-worked layouts: the numbers below were worked out on paper from docs/layout.md for
// the tiny models (hidden 128, 8 heads of 16 over 2 kv heads, vocabulary 1000, 8 experts of
// intermediate 64), then compared with make_plan's rank parameters and pieces, and for a few with
// the bytes of an actual export.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "export_reader.h"
#include "handmade.h"
#include "shard/config_plan.h"
#include "shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using nlohmann::json;
using testing::TempDir;

constexpr uint64_t kBf16 = 2;  // bytes
constexpr uint64_t kHidden = 128;

// A piece as layout.md speaks of it: which checkpoint rows and columns land where in the rank
// tensor.
struct Piece {
  std::string source;
  uint64_t row_begin, row_end, col_begin, col_end;
  uint64_t dst_offset;
  uint32_t divisor = 1;
  bool operator==(const Piece&) const = default;
};

void PrintTo(const Piece& p, std::ostream* os) {
  *os << fmt::format("{{{} rows [{}, {}) cols [{}, {}) -> {} /{}}}", p.source, p.row_begin,
                     p.row_end, p.col_begin, p.col_end, p.dst_offset, p.divisor);
}

// A layout; the other ParallelConfig fields keep their defaults.
struct Layout {
  int tp = 1;
  int ep = 1;
  std::optional<int> redundant_experts = {};
  std::vector<std::vector<int>> expert_map = {};
  RowBias row_bias = RowBias::kFull;
  bool split_shared_experts = true;
  std::optional<DType> dtype = {};
};

Plan plan_for(const std::string& model, const Layout& layout) {
  ParallelConfig parallel;
  parallel.tp = layout.tp;
  parallel.ep = layout.ep;
  parallel.redundant_experts = layout.redundant_experts;
  parallel.expert_map = layout.expert_map;
  parallel.row_bias = layout.row_bias;
  parallel.split_shared_experts = layout.split_shared_experts;
  parallel.dtype = layout.dtype;
  return make_plan(Checkpoint::open(model), parallel);
}

const PlanParam* find_param(const Plan& plan, int rank, const std::string& name) {
  const RankPlan& r = plan.ranks.at(static_cast<size_t>(rank));
  const auto it = std::find_if(r.params.begin(), r.params.end(),
                               [&](const PlanParam& p) { return p.name == name; });
  return it == r.params.end() ? nullptr : &*it;
}

const PlanParam& param(const Plan& plan, int rank, const std::string& name) {
  const PlanParam* p = find_param(plan, rank, name);
  if (p == nullptr)
    throw std::runtime_error(fmt::format("rank {} has no parameter {}", rank, name));
  return *p;
}

std::vector<Piece> pieces(const Plan& plan, const PlanParam& param) {
  std::vector<Piece> out;
  for (const PlanPiece& p : param.pieces) {
    out.push_back({plan.sources.at(p.source).name, p.row_begin, p.row_end, p.col_begin, p.col_end,
                   p.dst_offset, p.divisor});
  }
  return out;
}

// The logical expert in each slot of a w13 parameter, read off the gate piece of each slot.
std::vector<int> slot_experts(const Plan& plan, const PlanParam& w13) {
  const uint64_t slot_bytes = w13.nbytes / w13.shape.at(0);
  std::vector<int> out(w13.shape.at(0), -1);
  for (const PlanPiece& p : w13.pieces) {
    const std::string& name = plan.sources.at(p.source).name;
    if (name.find("gate_proj") == std::string::npos && name.find(".w1.") == std::string::npos)
      continue;
    const size_t at = name.find("experts.") + 8;
    out.at(p.dst_offset / slot_bytes) = std::stoi(name.substr(at));
  }
  return out;
}

// ---- kv heads ----

TEST(PlanCases, KvHeadsReplicatedWhenTpExceedsThem) {
  // tp 8 over 2 kv heads: nq = 1, nkv = 1, ranks 0-3 hold kv head 0 and ranks 4-7 kv head 1.
  const Plan plan = plan_for(testing::tiny_model("llama"), {.tp = 8});
  const std::string layer = "model.layers.1.self_attn.";
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const PlanParam& qkv = param(plan, r, layer + "qkv_proj.weight");
    EXPECT_EQ(qkv.shape, (Shape{(1 + 2) * 16, kHidden}));  // (nq + 2) * head_dim rows
    const uint64_t q = 16 * r;
    const uint64_t kv = 16 * (r / 4);
    EXPECT_EQ(pieces(plan, qkv),
              (std::vector<Piece>{
                  {layer + "q_proj.weight", q, q + 16, 0, kHidden, 0},
                  {layer + "k_proj.weight", kv, kv + 16, 0, kHidden, 16 * kHidden * kBf16},
                  {layer + "v_proj.weight", kv, kv + 16, 0, kHidden, 32 * kHidden * kBf16}}));
  }
}

TEST(PlanCases, KvHeadsSplitWhenTpIsBelowThem) {
  // tp 1 keeps both kv heads: rows 8 * 16 of q, then 2 * 16 of k and of v.
  const Plan plan = plan_for(testing::tiny_model("llama"), {.tp = 1});
  const std::string layer = "model.layers.0.self_attn.";
  const PlanParam& qkv = param(plan, 0, layer + "qkv_proj.weight");
  EXPECT_EQ(qkv.shape, (Shape{(8 + 4) * 16, kHidden}));
  EXPECT_EQ(
      pieces(plan, qkv),
      (std::vector<Piece>{{layer + "q_proj.weight", 0, 128, 0, kHidden, 0},
                          {layer + "k_proj.weight", 0, 32, 0, kHidden, 128 * kHidden * kBf16},
                          {layer + "v_proj.weight", 0, 32, 0, kHidden, 160 * kHidden * kBf16}}));
}

TEST(PlanCases, QkvBiasFollowsTheKvHeadRule) {
  // Qwen2's q/k/v biases at tp 4: rank 3 holds q heads 6-7 and kv head 1 (3 / (4 / 2)).
  const Plan plan = plan_for(testing::tiny_model("qwen2"), {.tp = 4});
  const std::string layer = "model.layers.2.self_attn.";
  const PlanParam& bias = param(plan, 3, layer + "qkv_proj.bias");
  EXPECT_EQ(bias.shape, (Shape{(2 + 2) * 16}));
  EXPECT_EQ(pieces(plan, bias),
            (std::vector<Piece>{{layer + "q_proj.bias", 96, 128, 0, 1, 0},
                                {layer + "k_proj.bias", 16, 32, 0, 1, 32 * kBf16},
                                {layer + "v_proj.bias", 16, 32, 0, 1, 48 * kBf16}}));
}

TEST(PlanCases, Glm4MoeLayers) {
  // GLM-4.5 at tp 4 x ep 2 (heads of 32): attention_bias gives q/k/v biases and no o_proj bias;
  // rank 3 holds q heads 6-7 and kv head 1, experts 4-7 (ep rank 1) at moe tp rank 1.
  const Plan plan = plan_for(testing::tiny_model("glm4_moe"), {.tp = 4, .ep = 2});
  EXPECT_EQ(plan.model.architecture, "Glm4MoeForCausalLM");
  const std::string a = "model.layers.2.self_attn.";
  const PlanParam& bias = param(plan, 3, a + "qkv_proj.bias");
  EXPECT_EQ(bias.shape, (Shape{(2 + 2) * 32}));
  EXPECT_EQ(pieces(plan, bias),
            (std::vector<Piece>{{a + "q_proj.bias", 192, 256, 0, 1, 0},
                                {a + "k_proj.bias", 32, 64, 0, 1, 64 * kBf16},
                                {a + "v_proj.bias", 32, 64, 0, 1, 96 * kBf16}}));
  EXPECT_EQ(find_param(plan, 3, a + "o_proj.bias"), nullptr);
  const PlanParam& q_norm = param(plan, 3, a + "q_norm.weight");
  EXPECT_EQ(q_norm.dtype, DType::kF32);
  EXPECT_EQ(q_norm.shape, (Shape{32}));
  EXPECT_EQ(param(plan, 3, a + "k_norm.weight").dtype, DType::kF32);

  // Layer 0 is dense (first_k_dense_replace = 1), layers 1 and 2 have routed and shared experts.
  EXPECT_EQ(param(plan, 3, "model.layers.0.mlp.gate_up_proj.weight").shape,
            (Shape{2 * 384 / 4, kHidden}));
  EXPECT_EQ(find_param(plan, 3, "model.layers.0.mlp.experts.w13_weight"), nullptr);
  const std::string m = "model.layers.1.mlp.";
  EXPECT_EQ(find_param(plan, 3, m + "gate_up_proj.weight"), nullptr);
  const PlanParam& w13 = param(plan, 3, m + "experts.w13_weight");
  EXPECT_EQ(w13.shape, (Shape{4, 2 * 32, kHidden}));
  EXPECT_EQ(pieces(plan, w13).front(), (Piece{m + "experts.4.gate_proj.weight", 32, 64, 0, kHidden, 0}));
  EXPECT_EQ(param(plan, 3, m + "shared_experts.gate_up_proj.weight").shape,
            (Shape{2 * 64 / 4, kHidden}));
  EXPECT_EQ(param(plan, 3, m + "gate.weight").shape, (Shape{8, kHidden}));
  const PlanParam& score = param(plan, 3, m + "gate.e_score_correction_bias");
  EXPECT_EQ(score.dtype, DType::kF32);
  EXPECT_EQ(score.shape, (Shape{8}));

  // The multi-token-prediction layer (index 3 = num_hidden_layers) is skipped whole.
  for (const PlanParam& p : plan.ranks.at(0).params)
    EXPECT_EQ(p.name.find("layers.3."), std::string::npos) << p.name;
  EXPECT_NE(std::find(plan.skipped.begin(), plan.skipped.end(), "model.layers.3.eh_proj.weight"),
            plan.skipped.end());
}

TEST(PlanCases, Glm4MoeWithoutQkNorm) {
  // GLM-4.5-Air: use_qk_norm false and no q/k norms in the checkpoint; nothing else changes.
  TempDir dir;
  make_tiny({.arch = "glm4_moe", .out = dir.file("m"), .seed = testing::test_seed()});
  testing::drop_tensors(dir.file("m"), "self_attn.q_norm.");
  testing::drop_tensors(dir.file("m"), "self_attn.k_norm.");
  json config = json::parse(testing::read_file(dir.file("m/config.json")));
  config["use_qk_norm"] = false;
  testing::write_file(dir.file("m/config.json"), config.dump());
  const Plan plan = plan_for(dir.file("m"), {.tp = 2});
  EXPECT_EQ(find_param(plan, 1, "model.layers.0.self_attn.q_norm.weight"), nullptr);
  EXPECT_NE(find_param(plan, 1, "model.layers.0.self_attn.qkv_proj.bias"), nullptr);
}

TEST(PlanCases, DeepseekV32IndexerIsReplicatedWholeAndKeepsItsFp8) {
  // vLLM and SGLang replicate the indexer: every rank holds wq_b, wk, k_norm and weights_proj whole. In
  // a block-FP8 checkpoint wq_b and wk are FP8 with their block scales, weights_proj stays BF16.
  TempDir dir;
  make_tiny({.arch = "deepseek_v32", .out = dir.file("m"), .seed = testing::test_seed(), .quant = "fp8-block"});
  const json config = json::parse(testing::read_file(dir.file("m/config.json")));
  const uint64_t heads = config.at("index_n_heads"), dim = config.at("index_head_dim");
  const uint64_t h = config.at("hidden_size"), q_lora = config.at("q_lora_rank");
  const Plan plan = plan_for(dir.file("m"), {.tp = 4, .ep = 2});
  const std::string p = "model.layers.1.self_attn.indexer.";
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const PlanParam& wq_b = param(plan, r, p + "wq_b.weight");
    EXPECT_EQ(wq_b.dtype, DType::kF8E4M3);
    EXPECT_EQ(wq_b.shape, (Shape{heads * dim, q_lora}));
    EXPECT_EQ(pieces(plan, wq_b), (std::vector<Piece>{{p + "wq_b.weight", 0, heads * dim, 0, q_lora, 0}}));
    EXPECT_EQ(param(plan, r, p + "wq_b.weight_scale_inv").shape, (Shape{heads * dim / 128, q_lora / 128}));
    EXPECT_EQ(param(plan, r, p + "wk.weight").dtype, DType::kF8E4M3);
    EXPECT_EQ(param(plan, r, p + "wk.weight_scale_inv").shape, (Shape{1, h / 128}));
    const PlanParam& weights = param(plan, r, p + "weights_proj.weight");
    EXPECT_EQ(weights.dtype, DType::kBF16);
    EXPECT_EQ(weights.shape, (Shape{heads, h}));
    EXPECT_EQ(find_param(plan, r, p + "weights_proj.weight_scale_inv"), nullptr);
    EXPECT_EQ(param(plan, r, p + "k_norm.bias").shape, Shape{dim});
  }
  const json& unconverted = config.at("quantization_config").at("modules_to_not_convert");
  EXPECT_NE(std::find(unconverted.begin(), unconverted.end(), "model.layers.1.self_attn.indexer.weights_proj"),
            unconverted.end());
}

TEST(PlanCases, MiniMaxM2QkNormsSplitWithTheHeadsTheyNormalize) {
  // 8 q heads and 2 kv heads of 32 at tp 4: rank r's q_norm is the rows of its 2 q heads, its k_norm the
  // rows of the kv head it replicates (ranks 0-1 head 0, ranks 2-3 head 1), float32 as q/k norms are;
  // the router and score bias stay float32, whole.
  const Plan plan = plan_for(testing::tiny_model("minimax_m2"), {.tp = 4, .ep = 2});
  const std::string a = "model.layers.1.self_attn.";
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const uint64_t q = static_cast<uint64_t>(r) * 64, k = static_cast<uint64_t>(r / 2) * 32;
    const PlanParam& q_norm = param(plan, r, a + "q_norm.weight");
    EXPECT_EQ(q_norm.dtype, DType::kF32);
    EXPECT_EQ(pieces(plan, q_norm), (std::vector<Piece>{{a + "q_norm.weight", q, q + 64, 0, 1, 0}}));
    const PlanParam& k_norm = param(plan, r, a + "k_norm.weight");
    EXPECT_EQ(k_norm.dtype, DType::kF32);
    EXPECT_EQ(pieces(plan, k_norm), (std::vector<Piece>{{a + "k_norm.weight", k, k + 32, 0, 1, 0}}));
    const std::string m = "model.layers.1.block_sparse_moe.";
    const PlanParam& router = param(plan, r, m + "gate.weight");
    EXPECT_EQ(router.dtype, DType::kF32);
    EXPECT_EQ(router.shape, (Shape{8, kHidden}));
    EXPECT_EQ(param(plan, r, m + "e_score_correction_bias").dtype, DType::kF32);
    EXPECT_EQ(param(plan, r, m + "experts.w13_weight").shape, (Shape{4, 2 * 256 / 2, kHidden}));
  }
}

TEST(PlanCases, Llama4TransposesFusedExpertsAndPermutesRotaryPairs) {
  // 8 experts of 64 stored [E, H, 2 * 64] (gate columns, then up) and [E, 64, H]; tp 4 x ep 2: moe_tp 2,
  // 4 experts a rank. Slot j of rank r (EP rank r / 2, moe-tp rank r % 2) holds expert x = 4 * (r / 2) + j:
  // its gate columns [32 m, 32 m + 32) then up columns [64 + 32 m, ...), each transposed to [32, H], from
  // source rows [x H, (x + 1) H) of the [E * H, 128] view; w2 takes rows [64 x + 32 m, ...) transposed.
  const Plan plan = plan_for(testing::tiny_model("llama4"), {.tp = 4, .ep = 2});
  const std::string f = "model.layers.1.feed_forward.";
  const uint64_t bf16 = 2;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const uint64_t m = static_cast<uint64_t>(r % 2);
    const PlanParam& w13 = param(plan, r, f + "experts.w13_weight");
    const PlanParam& w2 = param(plan, r, f + "experts.w2_weight");
    EXPECT_EQ(w13.shape, (Shape{4, 64, kHidden}));
    EXPECT_EQ(w2.shape, (Shape{4, kHidden, 32}));
    std::vector<Piece> want13, want2;
    for (uint64_t j = 0; j < 4; ++j) {
      const uint64_t x = 4 * static_cast<uint64_t>(r / 2) + j, slot = j * 64 * kHidden * bf16;
      want13.push_back({f + "experts.gate_up_proj", x * kHidden, (x + 1) * kHidden, 32 * m, 32 * m + 32, slot});
      want13.push_back({f + "experts.gate_up_proj", x * kHidden, (x + 1) * kHidden, 64 + 32 * m, 96 + 32 * m,
                        slot + 32 * kHidden * bf16});
      want2.push_back({f + "experts.down_proj", 64 * x + 32 * m, 64 * x + 32 * m + 32, 0, kHidden,
                       j * kHidden * 32 * bf16});
    }
    EXPECT_EQ(pieces(plan, w13), want13);
    EXPECT_EQ(pieces(plan, w2), want2);
    for (const PlanParam* p : {&w13, &w2}) {
      for (const PlanPiece& piece : p->pieces) EXPECT_TRUE(piece.transposed);
    }
    // q: 2 heads of 32 rows a rank; the [256, H] q_proj is read as [128, 2H] (row pairs side by side), and
    // each head's even rows (left halves) land before its odd rows (right halves).
    const PlanParam& qkv = param(plan, r, "model.layers.1.self_attn.qkv_proj.weight");
    const std::string q = "model.layers.1.self_attn.q_proj.weight";
    std::vector<Piece> want_q;
    for (uint64_t h = 0; h < 2; ++h) {
      const uint64_t row = (2 * static_cast<uint64_t>(r) + h) * 16, at = h * 32 * kHidden * bf16;
      want_q.push_back({q, row, row + 16, 0, kHidden, at});
      want_q.push_back({q, row, row + 16, kHidden, 2 * kHidden, at + 16 * kHidden * bf16});
    }
    std::vector<Piece> got = pieces(plan, qkv);
    got.resize(4);
    EXPECT_EQ(got, want_q);
    EXPECT_FALSE(qkv.pieces.front().transposed);
  }
  // The MoE layers are every second (interleave_moe_layer_step 2); the others have a dense MLP.
  EXPECT_EQ(find_param(plan, 0, "model.layers.0.feed_forward.experts.w13_weight"), nullptr);
  EXPECT_EQ(param(plan, 0, "model.layers.0.feed_forward.gate_up_proj.weight").shape, (Shape{2 * 256 / 4, kHidden}));
}

TEST(PlanCases, GptOssKeepsMxfp4OnWholeGroupsAndItsDownBiasOnTheFirstRank) {
  // MXFP4 experts (8 of 256, hidden 128) at tp 4 x ep 2: MoE-TP 2 takes 128 of the 256 intermediate rows of
  // a slot: w13's codes rows [2 * 128 m, ...) of [512, 64 bytes] (gate/up pairs kept together), w2's
  // code columns [64 m, 64 m + 64) of [128, 128 bytes], all U8 as the checkpoint stores them; the w2 bias is
  // read by MoE-TP rank 0 only (rank 1's stays zero), sinks split with the heads.
  testing::TempDir dir;
  const std::string model = dir.file("m");
  make_tiny({.arch = "gpt_oss", .out = model, .quant = "mxfp4"});
  const Plan plan = plan_for(model, {.tp = 4, .ep = 2});
  const std::string x = "model.layers.1.mlp.experts.";
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const uint64_t m = static_cast<uint64_t>(r % 2), first = 4 * static_cast<uint64_t>(r / 2);
    const PlanParam& w13 = param(plan, r, x + "w13_weight");
    EXPECT_EQ(w13.dtype, DType::kU8);
    EXPECT_EQ(w13.shape, (Shape{4, 256, 64}));
    EXPECT_EQ(pieces(plan, w13).front(),
              (Piece{x + "gate_up_proj_blocks", first * 512 + 256 * m, first * 512 + 256 * m + 256, 0, 64, 0}));
    const PlanParam& w2 = param(plan, r, x + "w2_weight");
    EXPECT_EQ(w2.shape, (Shape{4, kHidden, 64}));
    EXPECT_EQ(pieces(plan, w2).front(), (Piece{x + "down_proj_blocks", first * kHidden, (first + 1) * kHidden,
                                               64 * m, 64 * m + 64, 0}));
    EXPECT_EQ(param(plan, r, x + "w2_weight_scale").shape, (Shape{4, kHidden, 4}));
    const PlanParam& bias = param(plan, r, x + "w2_bias");
    EXPECT_EQ(bias.shape, (Shape{4, kHidden}));
    EXPECT_EQ(bias.pieces.size(), m == 0 ? 4u : 0u);
    EXPECT_EQ(param(plan, r, "model.layers.1.self_attn.sinks").pieces.front().row_begin, 2u * static_cast<uint64_t>(r));
  }
}

TEST(PlanCases, Qwen3NextLinearAttentionSplitsByKeyHeadGroupsAndConvChannels) {
  // Layer 0 is linear attention: 8 key heads and 16 value heads of 16, so a key-head group of in_proj_qkvz
  // is 16 + 16 + 2 x (2 x 16) = 96 rows and rank r of 4 takes groups 2r, 2r + 1 (rows [192r, 192r + 192)),
  // and of in_proj_ba 4 rows a group; the conv1d [512, 1, 4] stacks 128 q, 128 k and 256 v channels, of
  // which rank r takes 32, 32 and 64. Layer 1 is gated full attention: q_proj's 512 rows (8 heads of
  // query and gate, 64 rows a head) give rank r rows [128r, 128r + 128).
  const Plan plan = plan_for(testing::tiny_model("qwen3_next"), {.tp = 4, .ep = 2});
  const std::string l = "model.layers.0.linear_attn.";
  for (uint64_t r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const int rank = static_cast<int>(r);
    EXPECT_EQ(pieces(plan, param(plan, rank, l + "in_proj_qkvz.weight")),
              (std::vector<Piece>{{l + "in_proj_qkvz.weight", 192 * r, 192 * r + 192, 0, kHidden, 0}}));
    EXPECT_EQ(pieces(plan, param(plan, rank, l + "in_proj_ba.weight")),
              (std::vector<Piece>{{l + "in_proj_ba.weight", 8 * r, 8 * r + 8, 0, kHidden, 0}}));
    const PlanParam& conv = param(plan, rank, l + "conv1d.weight");
    EXPECT_EQ(conv.shape, (Shape{128, 1, 4}));
    const uint64_t row = 4 * kBf16;
    EXPECT_EQ(pieces(plan, conv), (std::vector<Piece>{{l + "conv1d.weight", 32 * r, 32 * r + 32, 0, 4, 0},
                                                      {l + "conv1d.weight", 128 + 32 * r, 160 + 32 * r, 0, 4,
                                                       32 * row},
                                                      {l + "conv1d.weight", 256 + 64 * r, 320 + 64 * r, 0, 4,
                                                       64 * row}}));
    const PlanParam& a_log = param(plan, rank, l + "A_log");
    EXPECT_EQ(a_log.dtype, DType::kF32);
    EXPECT_EQ(pieces(plan, a_log), (std::vector<Piece>{{l + "A_log", 4 * r, 4 * r + 4, 0, 1, 0}}));
    EXPECT_EQ(param(plan, rank, l + "dt_bias").dtype, DType::kBF16);
    EXPECT_EQ(param(plan, rank, l + "dt_bias").shape, Shape{4});
    EXPECT_EQ(param(plan, rank, l + "norm.weight").shape, Shape{16});
    EXPECT_EQ(pieces(plan, param(plan, rank, l + "out_proj.weight")),
              (std::vector<Piece>{{l + "out_proj.weight", 0, kHidden, 64 * r, 64 * r + 64, 0}}));
    const std::string a = "model.layers.1.self_attn.";
    const uint64_t kv = r / 2 * 32;
    EXPECT_EQ(pieces(plan, param(plan, rank, a + "qkv_proj.weight")),
              (std::vector<Piece>{{a + "q_proj.weight", 128 * r, 128 * r + 128, 0, kHidden, 0},
                                  {a + "k_proj.weight", kv, kv + 32, 0, kHidden, 128 * kHidden * kBf16},
                                  {a + "v_proj.weight", kv, kv + 32, 0, kHidden, 160 * kHidden * kBf16}}));
    EXPECT_EQ(find_param(plan, rank, "model.layers.0.self_attn.qkv_proj.weight"), nullptr);
    EXPECT_EQ(find_param(plan, rank, "model.layers.1.linear_attn.conv1d.weight"), nullptr);
  }
  EXPECT_TRUE(std::any_of(plan.skipped.begin(), plan.skipped.end(),
                          [](const std::string& name) { return name == "mtp.fc.weight"; }));
}

TEST(PlanCases, Qwen3NextLinearHeadsMustDivideOverTheAttentionRanks) {
  // 4 key heads over tp 8 (the softmax heads divide): refused naming the field; with --dp 2 the
  // attention group is 4 ranks, which takes them.
  nlohmann::json config = json::parse(testing::read_file(testing::tiny_model("qwen3_next") + "/config.json"));
  config["linear_num_key_heads"] = 4;
  ParallelConfig parallel;
  parallel.tp = 8;
  parallel.ep = 2;
  try {
    plan_from_config(config, parallel, [](std::string_view) { return true; });
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.field(), "linear_num_key_heads");
  }
  parallel.dp = 2;
  const Plan plan = plan_from_config(config, parallel, [](std::string_view) { return true; });
  EXPECT_EQ(param(plan, 5, "model.layers.0.linear_attn.A_log").shape, Shape{16 / 4});
}

// ---- vocabulary ----

TEST(PlanCases, VocabPaddedTo64AndSplit) {
  // 1000 -> 1024 rows, 256 a rank at tp 4: rank 3 reads rows 768..999, its last 24 rows are zero.
  const Plan plan = plan_for(testing::tiny_model("llama"), {.tp = 4});
  for (const std::string name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    for (int r = 0; r < 4; ++r) {
      const PlanParam& table = param(plan, r, name);
      EXPECT_EQ(table.shape, (Shape{256, kHidden}));
      const uint64_t end = r == 3 ? 1000 : 256 * (r + 1);
      EXPECT_EQ(pieces(plan, table), (std::vector<Piece>{{name, 256u * r, end, 0, kHidden, 0}}));
      EXPECT_EQ(table.has_padding, r == 3) << "rank " << r;
    }
  }
}

TEST(PlanCases, TiedHeadIsNotARankParameter) {
  const Plan plan = plan_for(testing::tiny_model("qwen3"), {.tp = 2});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(find_param(plan, r, "lm_head.weight"), nullptr);
}

TEST(PlanCases, RankWithOnlyVocabPadding) {
  // Vocabulary 150 -> 192, 32 rows a rank at tp 6: rank 4 reads rows 128..149, rank 5 none at all.
  TempDir dir;
  const json config = testing::biased_llama_config();
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  const Plan plan = plan_for(dir.file("m"), {.tp = 6});
  const PlanParam& rank4 = param(plan, 4, "model.embed_tokens.weight");
  EXPECT_EQ(rank4.shape, (Shape{32, 48}));
  EXPECT_EQ(pieces(plan, rank4),
            (std::vector<Piece>{{"model.embed_tokens.weight", 128, 150, 0, 48, 0}}));
  const PlanParam& rank5 = param(plan, 5, "model.embed_tokens.weight");
  EXPECT_EQ(rank5.shape, (Shape{32, 48}));
  EXPECT_TRUE(rank5.pieces.empty());
  EXPECT_TRUE(rank5.has_padding);
}

// ---- experts ----

TEST(PlanCases, MoeRanksTp8Ep4) {
  // moe tp = 8 / 4 = 2, El = 8 / 4 = 2. Rank 5: ep rank 2, moe-tp rank 1, physical (= logical)
  // experts 4 and 5, rows [32, 64) of their gate and up projections and columns [32, 64) of their
  // down projections.
  const Plan plan = plan_for(testing::tiny_model("qwen3_moe"), {.tp = 8, .ep = 4});
  EXPECT_EQ(plan.moe_tp, 2);
  EXPECT_EQ(plan.physical_experts, 8);
  const RankPlan& rank = plan.ranks.at(5);
  EXPECT_EQ(rank.ep_rank, 2);
  EXPECT_EQ(rank.moe_tp_rank, 1);
  const std::string m = "model.layers.1.mlp.";
  const PlanParam& w13 = param(plan, 5, m + "experts.w13_weight");
  EXPECT_EQ(w13.shape, (Shape{2, 2 * 32, kHidden}));
  const uint64_t half = 32 * kHidden * kBf16;
  EXPECT_EQ(pieces(plan, w13),
            (std::vector<Piece>{{m + "experts.4.gate_proj.weight", 32, 64, 0, kHidden, 0},
                                {m + "experts.4.up_proj.weight", 32, 64, 0, kHidden, half},
                                {m + "experts.5.gate_proj.weight", 32, 64, 0, kHidden, 2 * half},
                                {m + "experts.5.up_proj.weight", 32, 64, 0, kHidden, 3 * half}}));
  const PlanParam& w2 = param(plan, 5, m + "experts.w2_weight");
  EXPECT_EQ(w2.shape, (Shape{2, kHidden, 32}));
  EXPECT_EQ(pieces(plan, w2),
            (std::vector<Piece>{
                {m + "experts.4.down_proj.weight", 0, kHidden, 32, 64, 0},
                {m + "experts.5.down_proj.weight", 0, kHidden, 32, 64, kHidden * 32 * kBf16}}));
  // The router is whole on every rank; layer 0 (mlp_only_layers) keeps a dense MLP split over all 8
  // ranks.
  EXPECT_EQ(param(plan, 5, m + "gate.weight").shape, (Shape{8, kHidden}));
  EXPECT_EQ(param(plan, 5, "model.layers.0.mlp.gate_up_proj.weight").shape,
            (Shape{2 * 384 / 8, kHidden}));
  EXPECT_EQ(find_param(plan, 5, "model.layers.0.mlp.experts.w13_weight"), nullptr);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(plan.ranks.at(r).ep_rank, r / 2) << r;
    EXPECT_EQ(plan.ranks.at(r).moe_tp_rank, r % 2) << r;
  }
}

TEST(PlanCases, MixtralExpertsKeepTheirModuleAndNames) {
  const Plan plan = plan_for(testing::tiny_model("mixtral"), {.tp = 2, .ep = 2});
  const std::string m = "model.layers.0.block_sparse_moe.";
  const PlanParam& w13 = param(plan, 1, m + "experts.w13_weight");
  EXPECT_EQ(w13.shape, (Shape{4, 2 * 256, kHidden}));  // moe tp 1: whole experts 4..7
  EXPECT_EQ(pieces(plan, w13).front(), (Piece{m + "experts.4.w1.weight", 0, 256, 0, kHidden, 0}));
  EXPECT_EQ(pieces(plan, w13).at(1),
            (Piece{m + "experts.4.w3.weight", 0, 256, 0, kHidden, 256 * kHidden * kBf16}));
  EXPECT_EQ(pieces(plan, param(plan, 1, m + "experts.w2_weight")).front(),
            (Piece{m + "experts.4.w2.weight", 0, kHidden, 0, 256, 0}));
}

TEST(PlanCases, RedundantExpertsDefaultPlacement) {
  // E = 8, R = 4, ep 4: P = 12, El = 3, map p -> p % 8. Rank 2 holds physical 6, 7, 8 = logical 6,
  // 7, 0; rank 3 holds physical 9, 10, 11 = logical 1, 2, 3 again.
  const Plan plan =
      plan_for(testing::tiny_model("qwen3_moe"), {.tp = 4, .ep = 4, .redundant_experts = 4});
  EXPECT_EQ(plan.physical_experts, 12);
  const std::vector<int> row = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3};
  EXPECT_EQ(plan.physical_to_logical,
            (std::vector<std::vector<int>>(3, row)));  // MoE layers 1, 2, 3
  const std::string w13 = "model.layers.2.mlp.experts.w13_weight";
  EXPECT_EQ(param(plan, 0, w13).shape, (Shape{3, 2 * 64, kHidden}));
  EXPECT_EQ(slot_experts(plan, param(plan, 0, w13)), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(slot_experts(plan, param(plan, 1, w13)), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(slot_experts(plan, param(plan, 2, w13)), (std::vector<int>{6, 7, 0}));
  EXPECT_EQ(slot_experts(plan, param(plan, 3, w13)), (std::vector<int>{1, 2, 3}));
}

TEST(PlanCases, RedundantExpertsWholeRankOfReplicas) {
  // R = 8: P = 16, El = 4, so rank 2 holds physical 8..11, logical 0..3 once more, with ep 1 inside
  // tp 2.
  const Plan plan =
      plan_for(testing::tiny_model("qwen3_moe"), {.tp = 4, .ep = 4, .redundant_experts = 8});
  EXPECT_EQ(slot_experts(plan, param(plan, 2, "model.layers.1.mlp.experts.w13_weight")),
            (std::vector<int>{0, 1, 2, 3}));
  const Plan ep1 =
      plan_for(testing::tiny_model("qwen3_moe"), {.tp = 2, .ep = 1, .redundant_experts = 2});
  EXPECT_EQ(slot_experts(ep1, param(ep1, 1, "model.layers.1.mlp.experts.w13_weight")),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1}));
}

TEST(PlanCases, CustomExpertMapPlacesSlots) {
  // Reversed map, different on the last layer, with 4 replicas; tp 8 x ep 4 gives El = 3, moe tp 2.
  std::vector<std::vector<int>> map(3, {7, 6, 5, 4, 3, 2, 1, 0, 7, 7, 0, 0});
  map[2] = {0, 1, 2, 3, 4, 5, 6, 7, 5, 5, 5, 5};
  const Plan plan = plan_for(testing::tiny_model("qwen3_moe"),
                             {.tp = 8, .ep = 4, .redundant_experts = 4, .expert_map = map});
  EXPECT_EQ(plan.physical_to_logical, map);
  EXPECT_EQ(slot_experts(plan, param(plan, 5, "model.layers.1.mlp.experts.w13_weight")),
            (std::vector<int>{1, 0, 7}));  // rank 5 = ep rank 2: physical 6, 7, 8
  EXPECT_EQ(slot_experts(plan, param(plan, 7, "model.layers.3.mlp.experts.w13_weight")),
            (std::vector<int>{5, 5, 5}));  // ep rank 3: physical 9, 10, 11
  const PlanParam& w13 = param(plan, 7, "model.layers.1.mlp.experts.w13_weight");
  EXPECT_EQ(pieces(plan, w13).front(),
            (Piece{"model.layers.1.mlp.experts.7.gate_proj.weight", 32, 64, 0, kHidden, 0}));
}

// ---- float32, MLA, shared experts, biases ----

TEST(PlanCases, Float32Tensors) {
  const Plan qwen3 = plan_for(testing::tiny_model("qwen3"), {.tp = 2, .dtype = DType::kF16});
  const PlanParam& q_norm = param(qwen3, 1, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(q_norm.dtype, DType::kF32);
  EXPECT_EQ(q_norm.shape, (Shape{32}));
  EXPECT_EQ(param(qwen3, 1, "model.layers.0.self_attn.k_norm.weight").dtype, DType::kF32);
  EXPECT_EQ(param(qwen3, 1, "model.layers.0.input_layernorm.weight").dtype, DType::kF16);

  const Plan ernie = plan_for(testing::tiny_model("ernie4_5_moe"), {.tp = 2});
  const PlanParam& bias = param(ernie, 0, "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.dtype, DType::kF32);
  EXPECT_EQ(bias.shape, (Shape{8}));  // squeezed from [1, 8]
  EXPECT_EQ(pieces(ernie, bias).front().source,
            "model.layers.1.mlp.moe_statics.e_score_correction_bias");
  // ERNIE's router is kept float32, as on disk and in vLLM and FastDeploy (docs/layout.md).
  EXPECT_EQ(param(ernie, 0, "model.layers.1.mlp.gate.weight").dtype, DType::kF32);
  for (const std::string& skipped : ernie.skipped)
    EXPECT_NE(skipped.find("mtp"), std::string::npos) << skipped;

  const Plan v3 = plan_for(testing::tiny_model("deepseek_v3"), {.tp = 2, .dtype = DType::kBF16});
  EXPECT_EQ(param(v3, 1, "model.layers.1.mlp.gate.e_score_correction_bias").dtype, DType::kF32);
}

TEST(PlanCases, ErnieWithoutMoeStatics) {
  // moe_statics is optional: without it the router has no score correction bias, and nothing fails.
  TempDir dir;
  make_tiny({.arch = "ernie4_5_moe", .out = dir.file("m"), .seed = testing::test_seed()});
  testing::drop_tensors(dir.file("m"), "moe_statics");
  const Plan plan = plan_for(dir.file("m"), {.tp = 2, .ep = 2});
  for (const RankPlan& rank : plan.ranks) {
    for (const PlanParam& p : rank.params) {
      EXPECT_EQ(p.name.find("e_score_correction_bias"), std::string::npos) << p.name;
    }
  }
  EXPECT_NE(find_param(plan, 1, "model.layers.1.mlp.experts.w13_weight"), nullptr);
}

TEST(PlanCases, DeepseekLatentAttention) {
  // V3: q_a (96 rows) and kv_a (64 + 8 rows) fused and replicated; q_b and kv_b split over tp 4.
  const Plan v3 = plan_for(testing::tiny_model("deepseek_v3"), {.tp = 4});
  const std::string a = "model.layers.0.self_attn.";
  const PlanParam& fused = param(v3, 3, a + "fused_qkv_a_proj.weight");
  EXPECT_EQ(fused.shape, (Shape{96 + 72, kHidden}));
  EXPECT_EQ(pieces(v3, fused), (std::vector<Piece>{{a + "q_a_proj.weight", 0, 96, 0, kHidden, 0},
                                                   {a + "kv_a_proj_with_mqa.weight", 0, 72, 0,
                                                    kHidden, 96 * kHidden * kBf16}}));
  EXPECT_EQ(param(v3, 3, a + "q_b_proj.weight").shape, (Shape{8 * 24 / 4, 96}));
  EXPECT_EQ(param(v3, 3, a + "kv_b_proj.weight").shape, (Shape{8 * 32 / 4, 64}));
  EXPECT_EQ(param(v3, 3, a + "o_proj.weight").shape, (Shape{kHidden, 8 * 16 / 4}));
  // The multi-token-prediction layer (index 3 = num_hidden_layers) is skipped whole.
  for (const PlanParam& p : v3.ranks.at(0).params)
    EXPECT_EQ(p.name.find("layers.3."), std::string::npos) << p.name;
  EXPECT_NE(std::find(v3.skipped.begin(), v3.skipped.end(), "model.layers.3.eh_proj.weight"),
            v3.skipped.end());

  // V2-Lite style (no q_lora_rank): q_proj split, kv_a_proj_with_mqa replicated.
  const Plan v2 = plan_for(testing::tiny_model("deepseek_v2"), {.tp = 4});
  EXPECT_EQ(param(v2, 2, a + "q_proj.weight").shape, (Shape{8 * 24 / 4, kHidden}));
  EXPECT_EQ(pieces(v2, param(v2, 2, a + "q_proj.weight")).front(),
            (Piece{a + "q_proj.weight", 96, 144, 0, kHidden, 0}));
  EXPECT_EQ(param(v2, 2, a + "kv_a_proj_with_mqa.weight").shape, (Shape{72, kHidden}));
  EXPECT_EQ(find_param(v2, 2, a + "fused_qkv_a_proj.weight"), nullptr);
}

TEST(PlanCases, SharedExpertsSplitOrWhole) {
  const std::string name = "model.layers.0.mlp.shared_expert.gate_up_proj.weight";
  const Plan split = plan_for(testing::tiny_model("qwen2_moe"), {.tp = 4});
  EXPECT_EQ(param(split, 1, name).shape, (Shape{2 * 128 / 4, kHidden}));
  const Plan whole =
      plan_for(testing::tiny_model("qwen2_moe"), {.tp = 4, .split_shared_experts = false});
  EXPECT_EQ(param(whole, 1, name).shape, (Shape{2 * 128, kHidden}));
  EXPECT_EQ(pieces(whole, param(whole, 1, name)),
            (std::vector<Piece>{
                {"model.layers.0.mlp.shared_expert.gate_proj.weight", 0, 128, 0, kHidden, 0},
                {"model.layers.0.mlp.shared_expert.up_proj.weight", 0, 128, 0, kHidden,
                 128 * kHidden * kBf16}}));
  EXPECT_EQ(param(whole, 1, "model.layers.0.mlp.shared_expert.down_proj.weight").shape,
            (Shape{kHidden, 128}));
  EXPECT_EQ(param(whole, 1, "model.layers.0.mlp.shared_expert_gate.weight").shape,
            (Shape{1, kHidden}));
}

TEST(PlanCases, RowBiasFullOrDivided) {
  TempDir dir;
  const json config = testing::biased_llama_config();
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  const Plan full = plan_for(dir.file("m"), {.tp = 3});
  const Plan divided = plan_for(dir.file("m"), {.tp = 3, .row_bias = RowBias::kDivided});
  for (const std::string name :
       {"model.layers.1.self_attn.o_proj.bias", "model.layers.1.mlp.down_proj.bias"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(pieces(full, param(full, 2, name)), (std::vector<Piece>{{name, 0, 48, 0, 1, 0, 1}}));
    EXPECT_EQ(pieces(divided, param(divided, 2, name)),
              (std::vector<Piece>{{name, 0, 48, 0, 1, 0, 3}}));
  }
  // Column-parallel biases are split like their weights, never divided.
  EXPECT_EQ(pieces(divided, param(divided, 2, "model.layers.1.mlp.gate_up_proj.bias")),
            (std::vector<Piece>{{"model.layers.1.mlp.gate_proj.bias", 64, 96, 0, 1, 0},
                                {"model.layers.1.mlp.up_proj.bias", 64, 96, 0, 1, 32 * kBf16}}));
  EXPECT_EQ(std::count(full.skipped.begin(), full.skipped.end(),
                       "model.layers.0.self_attn.rotary_emb.inv_freq"),
            1);
}

TEST(PlanCases, ParametersAreAlignedAndDisjoint) {
  const Plan plan =
      plan_for(testing::tiny_model("deepseek_v3"), {.tp = 4, .ep = 2, .redundant_experts = 2});
  for (const RankPlan& rank : plan.ranks) {
    uint64_t end = 0;
    for (const PlanParam& p : rank.params) {
      EXPECT_EQ(p.offset % kParamAlignment, 0u) << p.name;
      EXPECT_GE(p.offset, end) << p.name;
      EXPECT_EQ(p.nbytes, shape_nbytes(p.shape, p.dtype)) << p.name;
      end = p.offset + p.nbytes;
    }
    EXPECT_LE(end, rank.bytes);
  }
}

// ---- the same cases in the bytes of an export ----

// The rank tensors of one export, read back.
testing::ExportContents export_of(const std::string& model, const TempDir& dir,
                                  std::vector<std::string> layout) {
  std::vector<std::string> args = {"export", model, "--out", dir.file("out")};
  args.insert(args.end(), layout.begin(), layout.end());
  const testing::CommandResult result = testing::shardload_cli(args);
  if (result.exit_code != 0) throw std::runtime_error("shardload export failed: " + result.err);
  testing::Problems problems;
  testing::ExportContents contents = testing::read_export(dir.file("out"), problems);
  EXPECT_TRUE(problems.empty()) << problems.text();
  return contents;
}

// Rows [begin, end) of a checkpoint tensor, as bytes.
std::vector<std::byte> checkpoint_rows(const Checkpoint& ckpt, const std::string& name,
                                       uint64_t begin, uint64_t end) {
  const Checkpoint::Entry& entry = ckpt.at(name);
  const uint64_t row_bytes = entry.info->nbytes() / entry.info->shape.at(0);
  std::vector<std::byte> out((end - begin) * row_bytes);
  ckpt.files()[entry.file].read(*entry.info, begin * row_bytes, out);
  return out;
}

std::vector<std::byte> rank_rows(const testing::HostTensor& t, uint64_t begin, uint64_t end) {
  return {t.row(begin), t.row(begin) + (end - begin) * t.row_bytes()};
}

TEST(PlanCasesExport, VocabPaddingRowsAreZero) {
  TempDir dir;
  const std::string model = testing::tiny_model("llama");
  const testing::ExportContents ex = export_of(model, dir, {"--tp", "4"});
  const Checkpoint ckpt = Checkpoint::open(model);
  const testing::HostTensor& embed = ex.ranks.at(3).at("model.embed_tokens.weight");
  ASSERT_EQ(embed.shape, (Shape{256, kHidden}));
  EXPECT_EQ(rank_rows(embed, 0, 232),
            checkpoint_rows(ckpt, "model.embed_tokens.weight", 768, 1000));
  const std::vector<std::byte> padding = rank_rows(embed, 232, 256);
  EXPECT_TRUE(
      std::all_of(padding.begin(), padding.end(), [](std::byte b) { return b == std::byte{0}; }));
}

TEST(PlanCasesExport, KvHeadCopies) {
  TempDir dir;
  const std::string model = testing::tiny_model("llama");
  const testing::ExportContents ex = export_of(model, dir, {"--tp", "8"});
  const Checkpoint ckpt = Checkpoint::open(model);
  const std::string a = "model.layers.2.self_attn.";
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const testing::HostTensor& qkv = ex.ranks.at(r).at(a + "qkv_proj.weight");
    ASSERT_EQ(qkv.shape, (Shape{48, kHidden}));
    const uint64_t head = r / 4;
    EXPECT_EQ(rank_rows(qkv, 0, 16),
              checkpoint_rows(ckpt, a + "q_proj.weight", 16 * r, 16 * r + 16));
    EXPECT_EQ(rank_rows(qkv, 16, 32),
              checkpoint_rows(ckpt, a + "k_proj.weight", 16 * head, 16 * head + 16));
    EXPECT_EQ(rank_rows(qkv, 32, 48),
              checkpoint_rows(ckpt, a + "v_proj.weight", 16 * head, 16 * head + 16));
  }
}

TEST(PlanCasesExport, ExpertSlotsTp8Ep4) {
  TempDir dir;
  const std::string model = testing::tiny_model("qwen3_moe");
  const testing::ExportContents ex = export_of(model, dir, {"--tp", "8", "--ep", "4"});
  const Checkpoint ckpt = Checkpoint::open(model);
  const std::string m = "model.layers.3.mlp.";
  const testing::HostTensor& w13 = ex.ranks.at(5).at(m + "experts.w13_weight");
  ASSERT_EQ(w13.shape, (Shape{2, 64, kHidden}));
  // Slot 1 is expert 5: gate rows 32..63, then up rows 32..63.
  const std::vector<std::byte> slot1(w13.row(1), w13.row(1) + w13.row_bytes());
  std::vector<std::byte> expected = checkpoint_rows(ckpt, m + "experts.5.gate_proj.weight", 32, 64);
  const std::vector<std::byte> up = checkpoint_rows(ckpt, m + "experts.5.up_proj.weight", 32, 64);
  expected.insert(expected.end(), up.begin(), up.end());
  EXPECT_EQ(slot1, expected);
  EXPECT_EQ(ex.manifest.at("physical_to_logical_map"),
            json(std::vector<std::vector<int>>(3, {0, 1, 2, 3, 4, 5, 6, 7})));
}

}  // namespace
}  // namespace shardload
