// make-tiny --config --sparse on the real config.json files the repository carries in
// tests/data/configs (DeepSeek-V3 and V3.2 block FP8, Qwen3-30B-A3B, Qwen3-Next, gpt-oss, MiniMax-M2.5,
// Mixtral-8x7B, Llama-3.1-8B, Qwen2.5-7B, Qwen3-8B): hundreds of GB of tensors as holes, whose names, shapes
// and dtypes follow the config's numbers, and which `shardload plan` plans at several layouts (test_paths.h names the
// folder). SHARDLOAD_REFERENCE_CONFIGS, when set, names an outside copy of the same
// files (one folder per model) that the carried ones must equal byte for byte.

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "shardload/checkpoint.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "test_matrix.h"
#include "test_paths.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

const fs::path kConfigs = testing::test_configs_dir();

// The index's metadata.total_size, read on demand: the weight_map's entries are skipped, not parsed.
uint64_t index_total_size(const std::string& index_path) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string text = simdjson::padded_string::load(index_path);
  simdjson::ondemand::document index = parser.iterate(text);
  return index["metadata"]["total_size"].get_uint64();
}

// A sparse checkpoint of tests/data/configs/NAME, with its config, opened as the loader opens it: the index
// read and checked against every file's header by the library (built at -O1), not by this test's own -O0 copy
// of nlohmann's parser, which took a quarter of the Kimi-K2.5 test (208,215 entries).
struct Real {
  explicit Real(const std::string& name)
      : config_path((kConfigs / name / "config.json").string()),
        out(dir.file("model")),
        summary(make_tiny({.out = out, .config = config_path, .sparse = true})),
        config(json::parse(testing::read_file(config_path))),
        checkpoint(shardload::Checkpoint::open(out)),
        index_size(index_total_size(out + "/model.safetensors.index.json")) {
    for (const std::string& tensor : checkpoint.tensor_names()) total_size += checkpoint.at(tensor).info->nbytes();
  }

  uint64_t n(const char* field) const { return config.at(field).get<uint64_t>(); }
  void expect(const std::string& name, DType dtype, const Shape& shape) const {
    const shardload::Checkpoint::Entry* entry = checkpoint.find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_EQ(entry->info->dtype, dtype) << name;
    EXPECT_EQ(entry->info->shape, shape) << name;
  }
  bool has(const std::string& name) const { return checkpoint.find(name) != nullptr; }
  size_t tensor_count() const { return checkpoint.tensor_names().size(); }

  TempDir dir;
  std::string config_path;
  std::string out;
  TinySummary summary;
  json config;
  shardload::Checkpoint checkpoint;
  uint64_t index_size;      // the index's metadata.total_size
  uint64_t total_size = 0;  // of every tensor's bytes, as metadata.total_size counts them
};

uint64_t blocks_of(uint64_t n) { return (n + 127) / 128; }

// The deployments a real config is planned at: the first of ALL (expert parallelism, or plain tp for a dense
// model) in `make test`, every one under `make test-matrix`. The others plan the same tensors over other
// scopes (data-parallel attention, another tp), which the tiny families' DpScopes and plan tests check in
// `make test`; each plan of a real config takes seconds on the sanitized build.
std::vector<std::vector<std::string>> deployments(std::vector<std::vector<std::string>> all) {
  if (!testing::matrix_run()) all.resize(1);
  return all;
}

TEST(TinyRealConfigs, EveryConfigIsASmallSparseCheckpointThatPlans) {
  int configs = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kConfigs)) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    ++configs;
    const std::string name = entry.path().filename().string();
    // The largest models have tests of their own below, which make the same sparse checkpoint and plan it at
    // their deployments (each of their plans takes seconds on the sanitized build): here they are made and
    // checked under `make test-matrix` only, and planned there.
    const bool own_test = name == "qwen3-next-80b-a3b" || name.rfind("gpt-oss", 0) == 0 ||
                          name.rfind("minimax", 0) == 0 || name.rfind("glm", 0) == 0 ||
                          name.rfind("qwen3.6", 0) == 0 || name.rfind("gemma-4", 0) == 0 ||
                          name.rfind("kimi", 0) == 0 || name.rfind("deepseek-v4", 0) == 0;
    if (own_test && !testing::matrix_run()) continue;
    const Real real(name);
    EXPECT_EQ(testing::read_file(real.out + "/config.json"), testing::read_file(real.config_path));
    EXPECT_EQ(real.tensor_count(), real.summary.tensors) << name;
    EXPECT_EQ(real.total_size, real.summary.bytes) << name;
    EXPECT_EQ(real.index_size, real.summary.bytes) << name;
    EXPECT_GT(real.summary.bytes, uint64_t{10} << 30) << name << ": a real model's size";

    uint64_t apparent = 0;
    uint64_t allocated = 0;
    for (const fs::directory_entry& file : fs::directory_iterator(real.out)) {
      struct stat st {};
      ASSERT_EQ(::stat(file.path().c_str(), &st), 0);
      apparent += static_cast<uint64_t>(st.st_size);
      allocated += static_cast<uint64_t>(st.st_blocks) * 512;
      // Hub-sized shards of whole tensors: about 5 GB, more where a tensor of about 2 GB falls at a
      // shard's edge (GLM-5's last shard holds its MTP layer's embedding and head beside lm_head: 5.7 GB).
      if (file.path().extension() == ".safetensors") {
        EXPECT_LE(st.st_size, 6'000'000'000) << file.path() << ": Hub-sized shards";
      }
    }
    EXPECT_GT(apparent, real.summary.bytes) << name;
    EXPECT_LT(allocated, uint64_t{64} << 20) << name << ": headers and index only";

    // Layouts the model allows: tp dividing the heads, ep dividing the experts.
    if (own_test) continue;
    const uint64_t heads = real.n("num_attention_heads");
    uint64_t experts = 0;
    for (const char* field : {"n_routed_experts", "num_experts", "num_local_experts"}) {
      if (real.config.contains(field)) experts = real.n(field);
    }
    // The largest tp the heads allow in `make test` (with ep and with MoE-TP); tp 1 and 4 too under `make
    // test-matrix`: a smaller tp cuts the same tensors along the same dims, at other offsets.
    uint64_t largest = 1;
    for (uint64_t tp : {4, 8}) {
      if (heads % tp == 0) largest = tp;
    }
    for (uint64_t tp : {1, 4, 8}) {
      if (heads % tp != 0 || (tp != largest && !testing::matrix_run())) continue;
      std::vector<std::vector<std::string>> layouts = {{"--tp", std::to_string(tp)}};
      if (experts % tp == 0 && experts > 0 && tp > 1) {
        layouts.push_back({"--tp", std::to_string(tp), "--ep", std::to_string(tp)});
      }
      // gpt-oss's MXFP4 experts split over MoE-TP only on whole 32-value groups (GptOss... below).
      const bool mxfp4 = real.config.contains("quantization_config") &&
                         real.config.at("quantization_config").value("quant_method", "") == "mxfp4";
      for (std::vector<std::string> args : layouts) {
        const bool moe_tp = args.size() == 2;
        args.insert(args.begin(), {"plan", real.out});
        const testing::CommandResult r = testing::run_shardload(args);
        if (mxfp4 && moe_tp && real.n("intermediate_size") / tp % 32 != 0) {
          EXPECT_NE(r.exit_code, 0) << name << " tp " << tp << ": a cut inside an MXFP4 group";
          continue;
        }
        EXPECT_EQ(r.exit_code, 0) << name << " " << args[3] << " " << args.size() << ": " << r.err;
        EXPECT_NE(r.out.find("rank 0"), std::string::npos) << r.out;
      }
    }
  }
  EXPECT_GE(configs, 6);
}

TEST(TinyRealConfigs, DeepSeekV3IsBlockFp8WithItsShapes) {
  const Real r("deepseek-v3");
  const uint64_t hidden = r.n("hidden_size");
  const uint64_t layers = r.n("num_hidden_layers");
  const uint64_t dense = r.n("first_k_dense_replace");
  const uint64_t experts = r.n("n_routed_experts");
  const uint64_t heads = r.n("num_attention_heads");
  const uint64_t inter = r.n("intermediate_size");
  const uint64_t moe_inter = r.n("moe_intermediate_size");
  const uint64_t q_lora = r.n("q_lora_rank");
  const uint64_t kv_lora = r.n("kv_lora_rank");
  const uint64_t nope = r.n("qk_nope_head_dim");
  const uint64_t rope = r.n("qk_rope_head_dim");
  const uint64_t v = r.n("v_head_dim");
  ASSERT_EQ(r.n("num_nextn_predict_layers"), 1u);

  // A projection is its F8_E4M3 weight and its weight_scale_inv: two tensors.
  const uint64_t attention = 5 * 2 + 2;                // q_a, q_b, kv_a, kv_b, o; two norms
  const uint64_t dense_layer = 2 + attention + 3 * 2;  // norms, attention, MLP
  const uint64_t moe_layer =
      2 + attention + 2 + experts * 3 * 2 + 3 * 2;  // router, experts, shared
  const uint64_t mtp = 1 + 2 + 2 + moe_layer + 2;   // embed, enorm/hnorm, eh_proj, layer, head
  EXPECT_EQ(r.tensor_count(), 3 + dense * dense_layer + (layers - dense) * moe_layer + mtp);

  const DType f8 = DType::kF8E4M3;
  const DType f32 = DType::kF32;
  const std::string l0 = "model.layers.0.";
  r.expect("model.embed_tokens.weight", DType::kBF16, {r.n("vocab_size"), hidden});
  r.expect("lm_head.weight", DType::kBF16, {r.n("vocab_size"), hidden});
  r.expect(l0 + "mlp.gate_proj.weight", f8, {inter, hidden});
  r.expect(l0 + "mlp.gate_proj.weight_scale_inv", f32, {blocks_of(inter), blocks_of(hidden)});
  r.expect(l0 + "self_attn.q_a_proj.weight", f8, {q_lora, hidden});
  r.expect(l0 + "self_attn.q_b_proj.weight", f8, {heads * (nope + rope), q_lora});
  r.expect(l0 + "self_attn.kv_a_proj_with_mqa.weight", f8, {kv_lora + rope, hidden});
  r.expect(l0 + "self_attn.kv_a_proj_with_mqa.weight_scale_inv", f32,
           {blocks_of(kv_lora + rope), blocks_of(hidden)});
  r.expect(l0 + "self_attn.kv_b_proj.weight", f8, {heads * (nope + v), kv_lora});
  r.expect(l0 + "self_attn.o_proj.weight", f8, {hidden, heads * v});
  r.expect(l0 + "self_attn.kv_a_layernorm.weight", DType::kBF16, {kv_lora});
  const std::string moe = "model.layers." + std::to_string(dense) + ".mlp.";
  const std::string last = "experts." + std::to_string(experts - 1) + ".";
  r.expect(moe + last + "down_proj.weight", f8, {hidden, moe_inter});
  r.expect(moe + last + "down_proj.weight_scale_inv", f32,
           {blocks_of(hidden), blocks_of(moe_inter)});
  r.expect(moe + "gate.weight", DType::kBF16, {experts, hidden});
  r.expect(moe + "gate.e_score_correction_bias", f32, {experts});
  r.expect(moe + "shared_experts.up_proj.weight", f8, {moe_inter, hidden});
  EXPECT_FALSE(
      r.has("model.layers." + std::to_string(dense - 1) + ".mlp.experts.0.up_proj.weight"));
  const std::string mtp_layer = "model.layers." + std::to_string(layers) + ".";
  r.expect(mtp_layer + "eh_proj.weight", f8, {hidden, 2 * hidden});
  r.expect(mtp_layer + "shared_head.head.weight", DType::kBF16, {r.n("vocab_size"), hidden});
  EXPECT_TRUE(r.has(mtp_layer + "mlp." + last + "gate_proj.weight"));
  EXPECT_FALSE(r.has("model.layers." + std::to_string(layers + 1) + ".input_layernorm.weight"));
  EXPECT_GT(r.summary.bytes, uint64_t{600} << 30);
}

// Issue 20: DeepSeek-V3's block FP8 at 32 and 64 ranks plans only in the engines' large-EP layouts,
// which keep attention on small groups and replicate the dense MLP and shared experts; the plain
// tp 32 cuts the dense MLP inside 128-blocks and is refused naming that group.
TEST(TinyRealConfigs, DeepSeekV3PlansAtLargeEpWithDataParallelAttention) {
  const Real r("deepseek-v3");
  const auto plan = [&](std::vector<std::string> layout) {
    layout.insert(layout.begin(), {"plan", r.out});
    return testing::run_shardload(layout);
  };
  const auto refused = plan({"--tp", "32"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("does not fall on the 128-wide FP8 blocks (group dense_mlp, split over 32 ranks)"),
            std::string::npos)
      << refused.err;
  for (const auto& layout : {std::vector<std::string>{"--tp", "32", "--dp", "32", "--moe-a2a-backend", "deepep",
                                                      "--moe-dense-tp-size", "1"},
                             {"--tp", "64", "--dp", "8", "--ep", "64", "--moe-dense-tp-size", "1",
                              "--no-split-shared-experts"}}) {
    const auto ok = plan(layout);
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_NE(ok.out.find("scopes: attention=attention embedding=replicated lm_head=world "
                          "dense_mlp=replicated shared_experts=replicated"),
              std::string::npos)
        << ok.out;
    const std::string last = layout[1] == "32" ? "rank 31 (ep 31, moe_tp 0, dp 31, attn_tp 0)"
                                               : "rank 63 (ep 63, moe_tp 0, dp 7, attn_tp 7)";
    EXPECT_NE(ok.out.find(last), std::string::npos) << ok.out;
  }
}

TEST(TinyRealConfigs, DeepSeekV32AddsAReplicatedIndexerToEveryLayer) {
  // DeepSeek-V3.2: V3's tensors plus five indexer tensors (and two block scales) in each of the 61 layers
  // and the MTP layer; the indexer is whole on every rank at its usual deployments.
  const Real r("deepseek-v3.2");
  const Real v3("deepseek-v3");
  const uint64_t layers = r.n("num_hidden_layers") + r.n("num_nextn_predict_layers");
  EXPECT_EQ(r.tensor_count(), v3.tensor_count() + layers * 7);
  const uint64_t hidden = r.n("hidden_size"), q_lora = r.n("q_lora_rank");
  const uint64_t heads = r.n("index_n_heads"), dim = r.n("index_head_dim");
  const std::string p = "model.layers.61.self_attn.indexer.";  // the MTP layer's
  r.expect(p + "wq_b.weight", DType::kF8E4M3, {heads * dim, q_lora});
  r.expect(p + "wq_b.weight_scale_inv", DType::kF32, {blocks_of(heads * dim), blocks_of(q_lora)});
  r.expect(p + "wk.weight", DType::kF8E4M3, {dim, hidden});
  r.expect(p + "wk.weight_scale_inv", DType::kF32, {1, blocks_of(hidden)});
  r.expect(p + "weights_proj.weight", DType::kBF16, {heads, hidden});
  r.expect(p + "k_norm.bias", DType::kBF16, {dim});
  // Every rank's parameters: V3's plus the indexer's seven (PlanCases.DeepseekV32IndexerIsReplicated...
  // checks their pieces); 61 layers of which the MTP layer is skipped.
  for (const std::vector<std::string>& layout :
       deployments({{"--tp", "8", "--ep", "8"},
                    {"--tp", "32", "--dp", "32", "--ep", "32", "--moe-a2a-backend", "deepep", "--moe-dense-tp-size",
                     "1"}})) {
    std::vector<std::string> args = {"plan", r.out};
    args.insert(args.end(), layout.begin(), layout.end());
    const testing::CommandResult v32 = testing::run_shardload(args);
    ASSERT_EQ(v32.exit_code, 0) << v32.err;
    args[1] = v3.out;
    const testing::CommandResult base = testing::run_shardload(args);
    ASSERT_EQ(base.exit_code, 0) << base.err;
    const auto params = [](const std::string& out) {
      const size_t colon = out.find("): ", out.find("rank 0 ("));
      return std::stoull(out.substr(colon + 3));
    };
    EXPECT_EQ(params(v32.out), params(base.out) + 61 * 7) << layout[1];  // and wq_b's, wk's scales
  }
}

// GLM-4.7-Flash and GLM-5: DeepSeek-V3's and V3.2's tensors under GLM's configs, planned at the engines'
// deployments (tp 8 x ep 8, DP attention with deepep's replicated dense MLP). GLM-4.7-Flash's 20 heads do
// not split over 8: its tp 8 deployments keep attention on groups of 4 (--dp 2) or 1 (--dp 8).
TEST(TinyRealConfigs, GlmLatentAttentionModelsPlanAtTheirDeployments) {
  const Real flash("glm-4.7-flash");
  const Real glm5("glm-5-fp8");
  // One MTP layer past the 47 and 78 decoder layers, skipped; GLM-5's indexer in every layer, FP8 but
  // for weights_proj.
  flash.expect("model.layers.47.eh_proj.weight", DType::kBF16, {2048, 4096});
  flash.expect("model.layers.0.mlp.down_proj.weight", DType::kBF16, {2048, 10240});
  flash.expect("model.layers.1.mlp.gate.e_score_correction_bias", DType::kF32, {64});
  EXPECT_FALSE(flash.has("model.layers.0.mlp.gate.weight")) << "first_k_dense_replace 1";
  glm5.expect("model.layers.77.self_attn.indexer.wq_b.weight", DType::kF8E4M3, {32 * 128, 2048});
  glm5.expect("model.layers.77.self_attn.indexer.weights_proj.weight", DType::kBF16, {32, 6144});
  glm5.expect("model.layers.2.mlp.down_proj.weight_scale_inv", DType::kF32, {48, 96});
  EXPECT_TRUE(glm5.has("model.layers.3.mlp.experts.255.up_proj.weight"));
  const auto plan = [](const Real& r, std::vector<std::string> layout) {
    layout.insert(layout.begin(), {"plan", r.out});
    return testing::run_shardload(layout);
  };
  const auto refused = plan(flash, {"--tp", "8", "--ep", "8"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("does not divide 20 attention heads"), std::string::npos) << refused.err;
  for (const auto& layout :
       deployments({{"--tp", "8", "--ep", "8"},
                    {"--tp", "8", "--dp", "2", "--ep", "8"},
                    {"--tp", "8", "--dp", "8", "--ep", "8", "--moe-a2a-backend", "deepep", "--moe-dense-tp-size",
                     "1"}})) {
    for (const Real* r : {&flash, &glm5}) {
      if (r == &flash && layout.size() == 4) continue;
      const auto ok = plan(*r, layout);
      EXPECT_EQ(ok.exit_code, 0) << r->config_path << " " << layout.size() << ": " << ok.err;
      EXPECT_NE(ok.out.find("rank 7 (ep 7, moe_tp 0"), std::string::npos) << ok.out;
    }
  }
}

TEST(TinyRealConfigs, Qwen3NextPlansItsHybridLayersAtItsDeployments) {
  // Qwen3-Next-80B-A3B: 48 layers, full attention at 3, 7, ..., 47 (full_attention_interval 4) and gated
  // DeltaNet elsewhere, every layer MoE with 512 experts and a shared expert. Planned at tp 4, at tp 8 with
  // ep 8, and with data-parallel attention (attention over 4 and 2 ranks): 16 key heads and 32 value heads
  // divide, and each rank's linear-attention tensors are its share of them.
  const Real r("qwen3-next-80b-a3b");
  const uint64_t h = r.n("hidden_size"), nk = r.n("linear_num_key_heads"), nv = r.n("linear_num_value_heads");
  const uint64_t dk = r.n("linear_key_head_dim"), dv = r.n("linear_value_head_dim");
  const uint64_t heads = r.n("num_attention_heads"), d = r.n("head_dim");
  const std::string lin = "model.layers.0.linear_attn.", full = "model.layers.3.self_attn.";
  r.expect(lin + "in_proj_qkvz.weight", DType::kBF16, {2 * nk * dk + 2 * nv * dv, h});
  r.expect(lin + "conv1d.weight", DType::kBF16, {2 * nk * dk + nv * dv, 1, r.n("linear_conv_kernel_dim")});
  r.expect(lin + "A_log", DType::kBF16, {nv});
  r.expect(full + "q_proj.weight", DType::kBF16, {2 * heads * d, h});
  EXPECT_FALSE(r.has("model.layers.3.linear_attn.A_log"));
  EXPECT_FALSE(r.has("model.layers.0.self_attn.q_proj.weight"));
  r.expect("model.layers.47.mlp.experts.511.down_proj.weight", DType::kBF16, {h, r.n("moe_intermediate_size")});
  // Per rank: 36 linear layers of 15 parameters (2 norms, 7 linear attention, router, w13, w2, the shared
  // expert's 2 and its gate), 12 full layers of 12 (4 attention), embeddings, final norm, lm_head.
  for (const std::vector<std::string>& layout : deployments({{"--tp", "8", "--ep", "8"},
                                                              {"--tp", "4"},
                                                              {"--tp", "8", "--dp", "2", "--ep", "8"},
                                                              {"--tp", "8", "--dp", "4", "--ep", "8",
                                                               "--enable-dp-lm-head"}})) {
    std::vector<std::string> args = {"plan", r.out};
    args.insert(args.end(), layout.begin(), layout.end());
    const testing::CommandResult plan = testing::run_shardload(args);
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    const size_t colon = plan.out.find("): ", plan.out.find("rank 0 ("));
    EXPECT_EQ(std::stoull(plan.out.substr(colon + 3)), 36u * 15 + 12 * 12 + 3) << layout[1] << plan.out;
  }
}

TEST(TinyRealConfigs, Qwen36PlansItsMultimodalCheckpointsTextModelAtItsDeployments) {
  // Qwen3.6-27B (dense) and Qwen3.6-35B-A3B (256 experts + 1 shared), as the Hub ships them:
  // Qwen3_5(Moe)ForConditionalGeneration with the text fields under text_config and the text model under
  // model.language_model. (the vision tower is not generated). Planned at tp 8 (x ep 8) and with
  // data-parallel attention; the MoE's block FP8 at tp 8 puts 64 rows of each shared expert on a rank, inside
  // a 128-row block (vLLM issue 52997): refused, and taken with the shared experts replicated (DeepEP).
  for (const char* name : {"qwen3.6-27b", "qwen3.6-35b-a3b"}) {
    SCOPED_TRACE(name);
    const Real r(name);
    const json& t = r.config.at("text_config");
    const uint64_t h = t.at("hidden_size"), nk = t.at("linear_num_key_heads"), nv = t.at("linear_num_value_heads");
    const uint64_t dk = t.at("linear_key_head_dim"), dv = t.at("linear_value_head_dim");
    const std::string lin = "model.language_model.layers.0.linear_attn.";
    r.expect(lin + "in_proj_qkv.weight", DType::kBF16, {2 * nk * dk + nv * dv, h});
    r.expect(lin + "in_proj_z.weight", DType::kBF16, {nv * dv, h});
    r.expect(lin + "in_proj_b.weight", DType::kBF16, {nv, h});
    r.expect("model.language_model.layers.3.self_attn.q_proj.weight", DType::kBF16,
             {2 * t.at("num_attention_heads").get<uint64_t>() * t.at("head_dim").get<uint64_t>(), h});
    r.expect("lm_head.weight", DType::kBF16, {t.at("vocab_size"), h});
    EXPECT_FALSE(r.has("model.layers.0.input_layernorm.weight"));
    const bool moe = t.contains("num_experts");
    const std::vector<std::vector<std::string>> layouts =
        moe ? std::vector<std::vector<std::string>>{{"--tp", "8", "--ep", "8"},
                                                    {"--tp", "8", "--dp", "8", "--ep", "8"},
                                                    {"--tp", "8", "--dp", "4", "--ep", "8", "--enable-dp-lm-head"}}
            : std::vector<std::vector<std::string>>{{"--tp", "8"}, {"--tp", "8", "--dp", "8"}, {"--tp", "4"}};
    for (const std::vector<std::string>& layout : deployments(layouts)) {
      std::vector<std::string> args = {"plan", r.out};
      args.insert(args.end(), layout.begin(), layout.end());
      const testing::CommandResult plan = testing::run_shardload(args);
      EXPECT_EQ(plan.exit_code, 0) << layout.back() << plan.err;
      EXPECT_NE(plan.out.find("rank 3 "), std::string::npos) << plan.out;
    }
  }
  TempDir fp8;
  json config = json::parse(testing::read_file((kConfigs / "qwen3.6-35b-a3b" / "config.json").string()));
  config["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                   {"weight_block_size", {128, 128}}};
  testing::write_file(fp8.file("config.json"), config.dump(2));
  make_tiny({.out = fp8.file("model"), .config = fp8.file("config.json"), .sparse = true});
  const testing::CommandResult cut = testing::run_shardload({"plan", fp8.file("model"), "--tp", "8", "--ep", "8"});
  EXPECT_NE(cut.exit_code, 0);
  EXPECT_NE(cut.err.find("shared_expert.gate_up_proj.weight: the tensor-parallel cut [0, 64) of its 512 rows"),
            std::string::npos)
      << cut.err;
  EXPECT_EQ(testing::run_shardload({"plan", fp8.file("model"), "--tp", "8", "--dp", "8", "--moe-a2a-backend",
                                    "deepep"})
                .exit_code,
            0);
}

TEST(TinyRealConfigs, Gemma4PlansItsMultimodalCheckpointsTextModelAtItsDeployments) {
  // Gemma-4-26B-A4B (every layer MoE with 128 experts of 704 beside its dense MLP) and Gemma-4-31B (dense), as
  // Gemma4ForConditionalGeneration: sliding layers with 256-wide heads, every sixth layer full attention with
  // 512-wide heads and its own KV heads (2 and 4), K reused as V there (no v_proj). Planned at tp 8 (x ep 8)
  // and with data-parallel attention; the full layers' 2 KV heads replicated over 4 and 8 ranks.
  for (const char* name : {"gemma-4-26b-a4b", "gemma-4-31b"}) {
    SCOPED_TRACE(name);
    const Real r(name);
    const json& t = r.config.at("text_config");
    const uint64_t h = t.at("hidden_size"), heads = t.at("num_attention_heads"), kv = t.at("num_key_value_heads");
    const uint64_t global_kv = t.at("num_global_key_value_heads");
    const std::string l0 = "model.language_model.layers.0.", l5 = "model.language_model.layers.5.";
    r.expect(l0 + "self_attn.q_proj.weight", DType::kBF16, {heads * 256, h});
    r.expect(l0 + "self_attn.v_proj.weight", DType::kBF16, {kv * 256, h});
    r.expect(l5 + "self_attn.q_proj.weight", DType::kBF16, {heads * 512, h});
    r.expect(l5 + "self_attn.k_proj.weight", DType::kBF16, {global_kv * 512, h});
    r.expect(l5 + "self_attn.k_norm.weight", DType::kBF16, {512});
    r.expect(l5 + "layer_scalar", DType::kBF16, {1});
    EXPECT_FALSE(r.has(l5 + "self_attn.v_proj.weight")) << "K reused as V";
    EXPECT_FALSE(r.has("lm_head.weight")) << "tied";
    const bool moe = t.at("enable_moe_block").get<bool>();
    if (moe) {
      const uint64_t e = t.at("num_experts"), im = t.at("moe_intermediate_size");
      r.expect(l5 + "experts.gate_up_proj", DType::kBF16, {e, 2 * im, h});
      r.expect(l5 + "experts.down_proj", DType::kBF16, {e, h, im});
      r.expect(l5 + "router.per_expert_scale", DType::kBF16, {e});
    }
    const std::vector<std::vector<std::string>> layouts =
        moe ? std::vector<std::vector<std::string>>{{"--tp", "8", "--ep", "8"},
                                                    {"--tp", "8", "--dp", "2", "--ep", "8"},
                                                    {"--tp", "8", "--dp", "8", "--ep", "8", "--enable-dp-lm-head"}}
            : std::vector<std::vector<std::string>>{{"--tp", "8"}, {"--tp", "8", "--dp", "8"}, {"--tp", "4"}};
    for (const std::vector<std::string>& layout : deployments(layouts)) {
      std::vector<std::string> args = {"plan", r.out};
      args.insert(args.end(), layout.begin(), layout.end());
      const testing::CommandResult plan = testing::run_shardload(args);
      EXPECT_EQ(plan.exit_code, 0) << layout.back() << plan.err;
      EXPECT_NE(plan.out.find("rank 3 "), std::string::npos) << plan.out;
    }
  }
}

TEST(TinyRealConfigs, KimiK25PlansItsInt4ExpertsAtItsDeployments) {
  // Kimi-K2.5 as the Hub ships it: KimiK25ForConditionalGeneration, DeepSeek-V3's text model (61 layers, the
  // first dense, 384 routed experts of 2048 + 1 shared, MLA with 64 heads) under language_model., the routed
  // experts pack-quantized int4 in 32-value groups (int32 words, bf16 scales, an int32 weight_shape), the rest
  // bf16. Planned at tp 8 x ep 8, at tp 8 with MoE-TP (256 of each expert's 2048 rows a rank: 8 groups, 32
  // words), and under `make test-matrix` with data-parallel attention and at tp 16 x ep 16; each plan's seconds printed.
  const Real r("kimi-k2.5");
  const json& t = r.config.at("text_config");
  const uint64_t h = t.at("hidden_size"), im = t.at("moe_intermediate_size"), v = t.at("vocab_size");
  const std::string l = "language_model.model.layers.";
  r.expect(l + "1.mlp.experts.383.gate_proj.weight_packed", DType::kI32, {im, h / 8});
  r.expect(l + "1.mlp.experts.383.gate_proj.weight_scale", DType::kBF16, {im, h / 32});
  r.expect(l + "60.mlp.experts.0.down_proj.weight_packed", DType::kI32, {h, im / 8});
  r.expect(l + "60.mlp.experts.0.down_proj.weight_shape", DType::kI32, {2});
  r.expect(l + "1.mlp.shared_experts.gate_proj.weight", DType::kBF16, {im, h});
  r.expect(l + "0.mlp.gate_proj.weight", DType::kBF16, {t.at("intermediate_size"), h});
  r.expect(l + "1.self_attn.kv_b_proj.weight", DType::kBF16, {64 * (128 + 128), 512});
  r.expect(l + "1.mlp.gate.e_score_correction_bias", DType::kF32, {384});
  r.expect("language_model.lm_head.weight", DType::kBF16, {v, h});
  r.expect("language_model.model.embed_tokens.weight", DType::kBF16, {v, h});
  EXPECT_FALSE(r.has(l + "61.input_layernorm.weight")) << "no MTP layer";
  EXPECT_FALSE(r.has(l + "1.self_attn.q_a_proj.weight_packed"));
  // 61 x 9 attention and norms, 1 dense MLP, 60 x (router, bias, 3 shared, 384 x 3 x 3 expert tensors), 3.
  EXPECT_EQ(r.tensor_count(), 61u * 9 + 3 + 60u * (2 + 3 + 384 * 9) + 3);
  // EP and MoE-TP (the int4 groups cut) in `make test`; data-parallel attention and tp 16 too under `make
  // test-matrix` (DeepSeek-V3's own tests plan those layouts of the same text model in `make test`).
  std::vector<std::vector<std::string>> layouts = {{"--tp", "8", "--ep", "8"}, {"--tp", "8"}};
  if (testing::matrix_run()) {
    layouts.push_back({"--tp", "8", "--dp", "8", "--ep", "8"});
    layouts.push_back({"--tp", "16", "--ep", "16"});
  }
  for (const std::vector<std::string>& layout : layouts) {
    std::vector<std::string> args = {"plan", r.out};
    args.insert(args.end(), layout.begin(), layout.end());
    const auto start = std::chrono::steady_clock::now();
    const testing::CommandResult plan = testing::run_shardload(args);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("kimi-k2.5 plan %s: %.2f s\n", fmt::format("{}", fmt::join(layout, " ")).c_str(), seconds);
    EXPECT_EQ(plan.exit_code, 0) << fmt::format("{}", fmt::join(layout, " ")) << plan.err;
    EXPECT_NE(plan.out.find("rank 7 "), std::string::npos) << plan.out;
    EXPECT_NE(plan.out.find("208215 sources, 0 skipped"), std::string::npos) << plan.out;
  }
}

TEST(TinyRealConfigs, DeepseekV4FlashPlansAtItsDeployments) {
  // DeepSeek-V4-Flash (reconstructed, tests/data/configs/README.md) in DeepSeek's own names: 43 layers (two
  // sliding, then compression ratios 4 and 128 alternating, the last 4), every one MoE with 256 MXFP4 experts
  // of 2048 (I8 codes, F8_E8M0 scales) and one block-FP8 shared expert, block-FP8 attention with ue8m0
  // X.scale grids, the first 3 layers hash-routed. Planned at tp 8 x ep 8, at tp 8 with MoE-TP (256 of each
  // expert's 2048 rows a rank: 8 groups), with data-parallel attention (dp 8), each plan's seconds printed.
  const Real r("deepseek-v4-flash");
  const uint64_t h = r.n("hidden_size"), im = r.n("moe_intermediate_size"), v = r.n("vocab_size");
  r.expect("layers.0.ffn.experts.255.w1.weight", DType::kI8, {im, h / 2});
  r.expect("layers.0.ffn.experts.255.w1.scale", DType::kF8E8M0, {im, h / 32});
  r.expect("layers.42.ffn.experts.0.w2.weight", DType::kI8, {h, im / 2});
  r.expect("layers.42.ffn.experts.0.w2.scale", DType::kF8E8M0, {h, im / 32});
  r.expect("layers.1.attn.wq_b.weight", DType::kF8E4M3, {64 * 512, 1024});
  r.expect("layers.1.attn.wq_b.scale", DType::kF8E8M0, {64 * 512 / 128, 1024 / 128});
  r.expect("layers.1.attn.wo_a.weight", DType::kF8E4M3, {8 * 1024, 64 * 512 / 8});
  r.expect("layers.1.ffn.shared_experts.w2.scale", DType::kF8E8M0, {h / 128, im / 128});
  r.expect("layers.2.ffn.gate.tid2eid", DType::kI32, {v, 6});
  r.expect("layers.3.ffn.gate.bias", DType::kF32, {256});
  r.expect("layers.2.attn.indexer.compressor.ape", DType::kF32, {4, 2 * 128});
  r.expect("layers.3.attn.compressor.ape", DType::kF32, {128, 512});
  r.expect("layers.2.attn.compressor.wkv.weight", DType::kBF16, {2 * 512, h});
  r.expect("hc_head_fn", DType::kF32, {4, 4 * h});
  r.expect("embed.weight", DType::kBF16, {v, h});
  r.expect("head.weight", DType::kBF16, {v, h});
  EXPECT_FALSE(r.has("layers.0.attn.compressor.ape")) << "a sliding layer";
  EXPECT_FALSE(r.has("layers.3.attn.indexer.wq_b.weight")) << "ratio 128: no indexer";
  EXPECT_FALSE(r.has("layers.2.ffn.gate.bias")) << "a hash-routed layer";
  // 43 x (21 attention, norms and hyper-connection tensors, router and tid2eid or bias, 6 shared, 256 x 6
  // expert tensors), 41 compressors of 4, 21 indexers of 7; embed, norm, head and hc_head's 3.
  EXPECT_EQ(r.tensor_count(), 43u * (21 + 2 + 6 + 256 * 6) + 41 * 4 + 21 * 7 + 6);
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--tp", "8", "--ep", "8"}, {"--tp", "8"}, {"--tp", "8", "--dp", "8", "--ep", "8"}}) {
    std::vector<std::string> args = {"plan", r.out};
    args.insert(args.end(), layout.begin(), layout.end());
    const auto start = std::chrono::steady_clock::now();
    const testing::CommandResult plan = testing::run_shardload(args);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("deepseek-v4-flash plan %s: %.2f s\n", fmt::format("{}", fmt::join(layout, " ")).c_str(), seconds);
    EXPECT_EQ(plan.exit_code, 0) << fmt::format("{}", fmt::join(layout, " ")) << plan.err;
    EXPECT_NE(plan.out.find("rank 7 "), std::string::npos) << plan.out;
    EXPECT_NE(plan.out.find("67612 sources, 0 skipped"), std::string::npos) << plan.out;
  }
}

TEST(TinyRealConfigs, Qwen3MoeAndMixtralHaveEveryExpert) {
  {
    const Real r("qwen3-30b-a3b");
    const uint64_t layers = r.n("num_hidden_layers");
    const uint64_t experts = r.n("num_experts");
    const uint64_t hidden = r.n("hidden_size");
    const uint64_t head_dim = r.n("head_dim");
    // norms, q/k/v/o, q/k norms, router, experts; then embeddings, norm and head.
    EXPECT_EQ(r.tensor_count(), 3 + layers * (2 + 4 + 2 + 1 + 3 * experts));
    const std::string last = "model.layers." + std::to_string(layers - 1) + ".";
    r.expect(last + "mlp.experts." + std::to_string(experts - 1) + ".down_proj.weight",
             DType::kBF16, {hidden, r.n("moe_intermediate_size")});
    r.expect(last + "self_attn.q_proj.weight", DType::kBF16,
             {r.n("num_attention_heads") * head_dim, hidden});
    r.expect(last + "self_attn.k_proj.weight", DType::kBF16,
             {r.n("num_key_value_heads") * head_dim, hidden});
    r.expect(last + "self_attn.q_norm.weight", DType::kBF16, {head_dim});
  }
  {
    const Real r("mixtral-8x7b");
    const uint64_t layers = r.n("num_hidden_layers");
    const uint64_t experts = r.n("num_local_experts");
    EXPECT_EQ(r.tensor_count(), 3 + layers * (2 + 4 + 1 + 3 * experts));
    r.expect(
        "model.layers.0.block_sparse_moe.experts." + std::to_string(experts - 1) + ".w2.weight",
        DType::kBF16, {r.n("hidden_size"), r.n("intermediate_size")});
    r.expect("model.layers.0.block_sparse_moe.gate.weight", DType::kBF16,
             {experts, r.n("hidden_size")});
  }
}

TEST(TinyRealConfigs, DenseModelsHaveTheirBiasesAndNorms) {
  struct Case {
    const char* name;
    uint64_t extra_per_layer;  // Qwen2: q/k/v biases; Qwen3: q/k norms
    std::string extra;
  };
  for (const Case& k : {Case{"llama-3.1-8b", 0, ""}, Case{"qwen2.5-7b", 3, "k_proj.bias"},
                        Case{"qwen3-8b", 2, "k_norm.weight"}}) {
    const Real r(k.name);
    const uint64_t layers = r.n("num_hidden_layers");
    const uint64_t hidden = r.n("hidden_size");
    const uint64_t heads = r.n("num_attention_heads");
    const uint64_t head_dim = r.config.contains("head_dim") ? r.n("head_dim") : hidden / heads;
    EXPECT_EQ(r.tensor_count(), 3 + layers * (2 + 4 + 3 + k.extra_per_layer)) << k.name;
    const std::string last = "model.layers." + std::to_string(layers - 1) + ".";
    r.expect(last + "mlp.down_proj.weight", DType::kBF16, {hidden, r.n("intermediate_size")});
    r.expect(last + "self_attn.v_proj.weight", DType::kBF16,
             {r.n("num_key_value_heads") * head_dim, hidden});
    if (k.extra == "k_proj.bias") {
      r.expect(last + "self_attn.k_proj.bias", DType::kBF16,
               {r.n("num_key_value_heads") * head_dim});
    } else if (k.extra == "k_norm.weight") {
      r.expect(last + "self_attn.k_norm.weight", DType::kBF16, {head_dim});
    }
  }
}

// The carried files are the published ones, byte for byte, where an outside copy is at hand.
TEST(TinyRealConfigs, GptOssKeepsItsMxfp4ExpertsAndRefusesACutInsideAGroup) {
  // gpt-oss-20b and -120b as published: MXFP4 experts of intermediate_size 2880 = 90 groups of 32. They plan
  // at tp 8 x ep 8 (whole experts), tp 2 (1440 = 45 groups a rank) and DP attention; tp 4 would cut a rank's
  // 720 inside a group, and is an error naming the layer (vLLM pads such a rank instead).
  for (const char* name : {"gpt-oss-20b", "gpt-oss-120b"}) {
    SCOPED_TRACE(name);
    const Real r(name);
    const uint64_t e = r.n("num_local_experts"), h = r.n("hidden_size"), i = r.n("intermediate_size");
    const std::string x = "model.layers.0.mlp.experts.";
    r.expect(x + "gate_up_proj_blocks", DType::kU8, {e, 2 * i, h / 32, 16});
    r.expect(x + "gate_up_proj_scales", DType::kU8, {e, 2 * i, h / 32});
    r.expect(x + "down_proj_blocks", DType::kU8, {e, h, i / 32, 16});
    r.expect(x + "gate_up_proj_bias", DType::kBF16, {e, 2 * i});
    r.expect("model.layers.0.self_attn.sinks", DType::kBF16, {r.n("num_attention_heads")});
    for (const std::vector<std::string>& layout :
         {std::vector<std::string>{"--tp", "8", "--ep", "8"}, {"--tp", "2"}, {"--tp", "8", "--dp", "8", "--ep", "8"}}) {
      std::vector<std::string> args = {"plan", r.out};
      args.insert(args.end(), layout.begin(), layout.end());
      const testing::CommandResult plan = testing::run_shardload(args);
      EXPECT_EQ(plan.exit_code, 0) << plan.err;
    }
    const testing::CommandResult cut = testing::run_shardload({"plan", r.out, "--tp", "4"});
    EXPECT_NE(cut.exit_code, 0);
    EXPECT_NE(cut.err.find("model.layers.0.mlp.experts.w13_weight"), std::string::npos) << cut.err;
    EXPECT_NE(cut.err.find("MXFP4 32-value groups"), std::string::npos) << cut.err;
  }
}

// MiniMax-M2.5 (MiniMax-M2's geometry: 62 layers, 256 experts of 1536, 48 query and 8 kv heads of 128, per-layer
// q/k norms over the whole projection). The carried file is the published config.json of its BF16 conversion;
// the Hub's block FP8 one adds the quantization_config below (as published, fmt "float8_e4m3fn"). Both plan at
// tp 4, tp 8 x ep 8 and DP attention; the FP8 one at tp 8 without EP cuts the experts' 1536 rows into 192 per
// rank, inside the 128-blocks, and is refused naming the group (the engines deploy it with EP at tp 8).
TEST(TinyRealConfigs, MiniMaxM2PlansAtItsDeploymentsInBf16AndBlockFp8) {
  const Real bf16("minimax-m2.5");
  const uint64_t h = bf16.n("hidden_size"), e = bf16.n("num_local_experts"), i = bf16.n("intermediate_size");
  const uint64_t hq = bf16.n("num_attention_heads") * bf16.n("head_dim");
  const uint64_t hkv = bf16.n("num_key_value_heads") * bf16.n("head_dim");
  const uint64_t layers = bf16.n("num_hidden_layers");
  // Per layer: q/k/v/o, q/k norms, two layer norms, router and score bias, 3 matrices per expert.
  EXPECT_EQ(bf16.tensor_count(), 3 + layers * (4 + 2 + 2 + 2 + 3 * e));
  const std::string l = "model.layers." + std::to_string(layers - 1) + ".";
  bf16.expect(l + "self_attn.q_norm.weight", DType::kBF16, {hq});
  bf16.expect(l + "self_attn.k_norm.weight", DType::kBF16, {hkv});
  bf16.expect(l + "block_sparse_moe.gate.weight", DType::kF32, {e, h});
  bf16.expect(l + "block_sparse_moe.experts.255.w2.weight", DType::kBF16, {h, i});

  json fp8_config = bf16.config;
  fp8_config["quantization_config"] = {{"activation_scheme", "dynamic"},
                                       {"fmt", "float8_e4m3fn"},
                                       {"quant_method", "fp8"},
                                       {"weight_block_size", {128, 128}},
                                       {"modules_to_not_convert", {"gate", "e_score_correction_bias", "lm_head"}}};
  TempDir dir;
  const std::string config_path = dir.file("config.json");
  testing::write_file(config_path, fp8_config.dump(2));
  const std::string fp8 = dir.file("fp8");
  const TinySummary summary = make_tiny({.out = fp8, .config = config_path, .sparse = true});
  // Every matrix but the router gains a block scale; the router, score bias and norms stay as they are.
  EXPECT_EQ(summary.tensors, bf16.tensor_count() + layers * (4 + 3 * e));

  for (const std::string& model : {bf16.out, fp8}) {
    for (const std::vector<std::string>& layout :
         deployments({{"--tp", "8", "--ep", "8"}, {"--tp", "4"}, {"--tp", "8", "--dp", "8", "--ep", "8"}})) {
      std::vector<std::string> args = {"plan", model};
      args.insert(args.end(), layout.begin(), layout.end());
      const testing::CommandResult plan = testing::run_shardload(args);
      ASSERT_EQ(plan.exit_code, 0) << plan.err;
      // Per rank: 10 parameters a layer (fused qkv, o, q/k norms, two layer norms, router, score bias, w13,
      // w2), embeddings, final norm, lm_head; with FP8 the qkv, o, w13 and w2 block scales as well.
      const size_t colon = plan.out.find("): ", plan.out.find("rank 0 ("));
      EXPECT_EQ(std::stoull(plan.out.substr(colon + 3)), layers * (model == fp8 ? 14 : 10) + 3)
          << layout[1] << plan.out;
    }
  }
  const testing::CommandResult cut = testing::run_shardload({"plan", fp8, "--tp", "8"});
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.err.find("block_sparse_moe.experts.w13_weight: the tensor-parallel cut [0, 192) of its 1536 rows "
                         "does not fall on the 128-wide FP8 blocks (group experts, split over 8 ranks)"),
            std::string::npos)
      << cut.err;
}

TEST(TinyRealConfigs, TheCarriedConfigsEqualAReferenceCopy) {
  const char* reference = std::getenv("SHARDLOAD_REFERENCE_CONFIGS");
  if (reference == nullptr || *reference == '\0') {
    GTEST_SKIP() << "SHARDLOAD_REFERENCE_CONFIGS is not set: no outside copy to compare "
                 << kConfigs.string() << " with";
  }
  size_t compared = 0;
  for (const fs::directory_entry& model : fs::directory_iterator(kConfigs)) {
    if (!model.is_directory()) continue;
    const fs::path theirs = fs::path(reference) / model.path().filename() / "config.json";
    // Configs added later (DeepSeek-V3.2, gpt-oss) may be missing from an older reference copy.
    if (!fs::is_regular_file(theirs)) continue;
    EXPECT_EQ(testing::read_file((model.path() / "config.json").string()),
              testing::read_file(theirs.string()))
        << model.path().filename().string();
    ++compared;
  }
  EXPECT_GE(compared, 6u);
}

}  // namespace
}  // namespace shardload
