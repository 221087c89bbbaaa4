// What sets each family's checkpoint apart: biases, q/k norms, tied embeddings, MLA, MTP, float32
// tensors.

#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A generated checkpoint: its config and every tensor header, found through the index.
class Tiny {
 public:
  explicit Tiny(const std::string& arch, int layers = -1, int experts = -1) {
    make_tiny({.arch = arch,
               .out = dir_.path().string(),
               .seed = 3,
               .layers = layers,
               .experts = experts});
    config_ = json::parse(testing::read_file(dir_.file("config.json")));
    const json index = json::parse(testing::read_file(dir_.file("model.safetensors.index.json")));
    std::map<std::string, SafetensorsFile> files;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      auto it = files.find(file);
      if (it == files.end())
        it = files.emplace(file, SafetensorsFile::open(dir_.file(file.get<std::string>()))).first;
      const TensorInfo* info = it->second.header().find(name);
      if (info == nullptr) ADD_FAILURE() << name << " is not in " << file;
      if (info != nullptr) tensors_.emplace(name, *info);
    }
  }

  const json& config() const { return config_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo& at(const std::string& name) const { return tensors_.at(name); }
  size_t count_containing(const std::string& part) const {
    size_t n = 0;
    for (const auto& [name, info] : tensors_) n += name.find(part) != std::string::npos;
    return n;
  }
  size_t size() const { return tensors_.size(); }

 private:
  testing::TempDir dir_;
  json config_;
  std::map<std::string, TensorInfo> tensors_;
};

TEST(TinyFamilies, LlamaHasAHeadAndNoBiases) {
  Tiny t("llama");
  EXPECT_FALSE(t.config().at("tie_word_embeddings").get<bool>());
  EXPECT_TRUE(t.has("lm_head.weight"));
  EXPECT_EQ(t.count_containing(".bias"), 0u);
  EXPECT_EQ(t.count_containing("rotary_emb"), 0u);
}

TEST(TinyFamilies, Qwen2HasQkvBiases) {
  Tiny t("qwen2");
  EXPECT_FALSE(t.config().contains("head_dim"));
  for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
    EXPECT_TRUE(t.has(std::string("model.layers.0.self_attn.") + p + ".bias")) << p;
  }
  EXPECT_FALSE(t.has("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_EQ(t.at("model.layers.0.self_attn.k_proj.bias").shape, Shape{2 * 16});
}

TEST(TinyFamilies, Qwen3HasQkNormsAndTiesEmbeddings) {
  Tiny t("qwen3");
  EXPECT_TRUE(t.config().at("tie_word_embeddings").get<bool>());
  EXPECT_FALSE(t.has("lm_head.weight"));
  const uint64_t d = t.config().at("head_dim");
  EXPECT_NE(d * t.config().at("num_attention_heads").get<uint64_t>(), t.config().at("hidden_size"))
      << "head_dim should not be hidden / heads, so a loader must read it";
  EXPECT_EQ(t.at("model.layers.2.self_attn.q_norm.weight").shape, Shape{d});
  EXPECT_EQ(t.at("model.layers.2.self_attn.k_norm.weight").shape, Shape{d});
  EXPECT_EQ(t.count_containing(".bias"), 0u);
}

TEST(TinyFamilies, Qwen2MoeHasASharedExpertWithItsGate) {
  Tiny t("qwen2_moe");
  EXPECT_EQ(t.at("model.layers.0.mlp.shared_expert_gate.weight").shape,
            (Shape{1, t.config().at("hidden_size").get<uint64_t>()}));
  EXPECT_TRUE(t.has("model.layers.0.mlp.shared_expert.down_proj.weight"));
  EXPECT_TRUE(t.has("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(t.count_containing("mlp.experts."),
            3u * 8 * t.config().at("num_hidden_layers").get<size_t>());
}

TEST(TinyFamilies, Qwen3MoeHasADenseLayerAndNoSharedExperts) {
  Tiny t("qwen3_moe");
  EXPECT_EQ(t.config().at("mlp_only_layers"), json::array({0}));
  EXPECT_TRUE(t.has("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(t.has("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(t.has("model.layers.1.mlp.experts.7.down_proj.weight"));
  EXPECT_EQ(t.count_containing("shared_expert"), 0u);
  EXPECT_TRUE(t.has("model.layers.1.self_attn.q_norm.weight"));
}

TEST(TinyFamilies, MixtralUsesBlockSparseMoeNames) {
  Tiny t("mixtral");
  EXPECT_EQ(t.config().at("num_local_experts"), 8);
  EXPECT_TRUE(t.has("model.layers.0.block_sparse_moe.gate.weight"));
  for (const char* w : {"w1", "w2", "w3"}) {
    EXPECT_TRUE(t.has(std::string("model.layers.1.block_sparse_moe.experts.7.") + w + ".weight"))
        << w;
  }
  EXPECT_EQ(t.count_containing("mlp."), 0u);
}

TEST(TinyFamilies, DeepseekV2LiteHasNoQLora) {
  Tiny t("deepseek_v2");
  EXPECT_TRUE(t.config().at("q_lora_rank").is_null());
  EXPECT_TRUE(t.has("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(t.count_containing("q_a_proj"), 0u);
  EXPECT_TRUE(t.has("model.layers.0.self_attn.kv_a_proj_with_mqa.weight"));
  EXPECT_EQ(t.count_containing("e_score_correction_bias"), 0u);
  EXPECT_TRUE(t.has("model.layers.0.mlp.gate_proj.weight")) << "first_k_dense_replace = 1";
  EXPECT_TRUE(t.has("model.layers.1.mlp.shared_experts.gate_proj.weight"));
  const int layers = t.config().at("num_hidden_layers");
  EXPECT_EQ(t.count_containing("model.layers." + std::to_string(layers) + "."), 0u);
}

TEST(TinyFamilies, DeepseekV3HasQLoraCorrectionBiasAndAnMtpLayer) {
  Tiny t("deepseek_v3");
  const uint64_t e = t.config().at("n_routed_experts");
  EXPECT_TRUE(t.has("model.layers.0.self_attn.q_a_proj.weight"));
  EXPECT_TRUE(t.has("model.layers.0.self_attn.q_a_layernorm.weight"));
  EXPECT_FALSE(t.has("model.layers.0.self_attn.q_proj.weight"));
  const TensorInfo& bias = t.at("model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.dtype, DType::kF32);
  EXPECT_EQ(bias.shape, Shape{e});
  EXPECT_EQ(t.config().at("num_nextn_predict_layers"), 1);
  const std::string mtp =
      "model.layers." + std::to_string(t.config().at("num_hidden_layers").get<int>()) + ".";
  for (const char* name : {"embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight",
                           "shared_head.norm.weight", "shared_head.head.weight",
                           "self_attn.kv_b_proj.weight", "mlp.experts.0.up_proj.weight"}) {
    EXPECT_TRUE(t.has(mtp + name)) << name;
  }
}

TEST(TinyFamilies, ErnieKeepsRouterAndStaticsInF32AndHasMtp) {
  Tiny t("ernie4_5_moe");
  const uint64_t e = t.config().at("moe_num_experts");
  EXPECT_EQ(t.at("model.layers.1.mlp.gate.weight").dtype, DType::kF32);
  const TensorInfo& statics = t.at("model.layers.1.mlp.moe_statics.e_score_correction_bias");
  EXPECT_EQ(statics.dtype, DType::kF32);
  EXPECT_EQ(statics.shape, (Shape{1, e}));
  EXPECT_TRUE(t.has("model.layers.1.mlp.shared_experts.up_proj.weight"));
  EXPECT_TRUE(t.has("model.layers.0.mlp.up_proj.weight")) << "moe_layer_start_index = 1";
  EXPECT_GT(t.count_containing("mtp"), 0u);
  EXPECT_TRUE(t.has("model.mtp_linear_proj.0.weight"));
  EXPECT_TRUE(t.config().at("tie_word_embeddings").get<bool>());
  EXPECT_FALSE(t.has("lm_head.weight"));
}

TEST(TinyFamilies, Glm4MoeHasQkvBiasesQkNormsCorrectionBiasAndAnMtpLayer) {
  Tiny t("glm4_moe");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"Glm4MoeForCausalLM"}));
  const uint64_t e = c.at("n_routed_experts");
  const uint64_t d = c.at("head_dim");
  EXPECT_NE(d, c.at("hidden_size").get<uint64_t>() / c.at("num_attention_heads").get<uint64_t>());
  EXPECT_TRUE(c.at("attention_bias").get<bool>());
  for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
    EXPECT_TRUE(t.has(std::string("model.layers.0.self_attn.") + p + ".bias")) << p;
  }
  EXPECT_FALSE(t.has("model.layers.0.self_attn.o_proj.bias")) << "attention_bias is q/k/v only";
  EXPECT_TRUE(c.at("use_qk_norm").get<bool>());
  EXPECT_EQ(t.at("model.layers.0.self_attn.q_norm.weight").shape, Shape{d});
  EXPECT_TRUE(t.has("model.layers.0.mlp.gate_proj.weight")) << "first_k_dense_replace = 1";
  EXPECT_FALSE(t.has("model.layers.0.mlp.gate.weight"));
  const TensorInfo& bias = t.at("model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.dtype, DType::kF32);
  EXPECT_EQ(bias.shape, Shape{e});
  EXPECT_TRUE(t.has("model.layers.1.mlp.shared_experts.down_proj.weight"));
  EXPECT_TRUE(t.has("lm_head.weight"));
  const std::string mtp =
      "model.layers." + std::to_string(c.at("num_hidden_layers").get<int>()) + ".";
  for (const char* name : {"eh_proj.weight", "enorm.weight", "shared_head.head.weight",
                           "self_attn.q_proj.bias", "mlp.experts.0.up_proj.weight"}) {
    EXPECT_TRUE(t.has(mtp + name)) << name;
  }
}

TEST(TinyFamilies, DeepseekV32HasAnIndexerInEveryLayerAndItsMtpLayer) {
  Tiny t("deepseek_v32");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"DeepseekV32ForCausalLM"}));
  const uint64_t heads = c.at("index_n_heads"), dim = c.at("index_head_dim"), h = c.at("hidden_size");
  const uint64_t q_lora = c.at("q_lora_rank");
  const int layers = c.at("num_hidden_layers");
  for (int i = 0; i <= layers; ++i) {  // layer `layers` is the MTP layer
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.indexer.";
    EXPECT_EQ(t.at(p + "wq_b.weight").shape, (Shape{heads * dim, q_lora})) << i;
    EXPECT_EQ(t.at(p + "wk.weight").shape, (Shape{dim, h})) << i;
    EXPECT_EQ(t.at(p + "k_norm.weight").shape, Shape{dim}) << i;
    EXPECT_EQ(t.at(p + "k_norm.bias").shape, Shape{dim}) << i;
    EXPECT_EQ(t.at(p + "weights_proj.weight").shape, (Shape{heads, h})) << i;
  }
  EXPECT_EQ(t.count_containing(".indexer."), 5u * static_cast<size_t>(layers + 1));
  EXPECT_TRUE(t.has("model.layers.1.mlp.gate.e_score_correction_bias")) << "V3's router";
}

TEST(TinyFamilies, MiniMaxM2HasPerLayerQkNormsAFloat32RouterAndScoreBias) {
  Tiny t("minimax_m2");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"MiniMaxM2ForCausalLM"}));
  EXPECT_EQ(c.at("qk_norm_type"), "per_layer");
  const uint64_t d = c.at("head_dim"), e = c.at("num_local_experts"), h = c.at("hidden_size");
  const uint64_t heads = c.at("num_attention_heads"), kv = c.at("num_key_value_heads");
  EXPECT_NE(d, h / heads) << "head_dim is explicit, as in the real config";
  const int layers = c.at("num_hidden_layers");
  for (int i = 0; i < layers; ++i) {  // every layer MoE, no dense MLP
    const std::string p = "model.layers." + std::to_string(i) + ".";
    EXPECT_EQ(t.at(p + "self_attn.q_norm.weight").shape, Shape{heads * d}) << "over the whole projection";
    EXPECT_EQ(t.at(p + "self_attn.k_norm.weight").shape, Shape{kv * d});
    const TensorInfo& router = t.at(p + "block_sparse_moe.gate.weight");
    EXPECT_EQ(router.dtype, DType::kF32);
    EXPECT_EQ(router.shape, (Shape{e, h}));
    EXPECT_EQ(t.at(p + "block_sparse_moe.e_score_correction_bias").dtype, DType::kF32);
    EXPECT_TRUE(t.has(p + "block_sparse_moe.experts." + std::to_string(e - 1) + ".w3.weight"));
    EXPECT_FALSE(t.has(p + "mlp.gate_proj.weight"));
  }
}

TEST(TinyFamilies, Llama4HasFusedInOutExpertsAndAlternatingDenseLayers) {
  Tiny t("llama4");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"Llama4ForCausalLM"}));
  EXPECT_EQ(c.at("model_type"), "llama4_text");
  const uint64_t e = c.at("num_local_experts"), h = c.at("hidden_size"), i = c.at("intermediate_size");
  const uint64_t mlp = c.at("intermediate_size_mlp");
  EXPECT_NE(i, mlp) << "the experts' and the dense layers' widths differ, so a mix-up shows";
  const int layers = c.at("num_hidden_layers");
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".feed_forward.";
    if (l % 2 == 1) {  // interleave_moe_layer_step 2
      EXPECT_EQ(t.at(p + "experts.gate_up_proj").shape, (Shape{e, h, 2 * i})) << "[E, in, out]";
      EXPECT_EQ(t.at(p + "experts.down_proj").shape, (Shape{e, i, h}));
      EXPECT_EQ(t.at(p + "shared_expert.down_proj.weight").shape, (Shape{h, i}));
      EXPECT_EQ(t.at(p + "router.weight").shape, (Shape{e, h}));
      EXPECT_FALSE(t.has(p + "gate_proj.weight"));
    } else {
      EXPECT_EQ(t.at(p + "gate_proj.weight").shape, (Shape{mlp, h}));
      EXPECT_FALSE(t.has(p + "router.weight"));
    }
  }
  testing::TempDir dir;
  EXPECT_FALSE(tiny_writes_fp8("llama4"));
  EXPECT_THROW(make_tiny({.arch = "llama4", .out = dir.path().string(), .quant = "fp8"}), Error);
}

TEST(TinyFamilies, GptOssWritesBf16OrMxfp4Experts) {
  Tiny t("gpt_oss");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"GptOssForCausalLM"}));
  const uint64_t e = c.at("num_local_experts"), h = c.at("hidden_size"), i = c.at("intermediate_size");
  const std::string x = "model.layers.1.mlp.experts.";
  EXPECT_EQ(t.at(x + "gate_up_proj").shape, (Shape{e, h, 2 * i})) << "[E, in, out], as transformers writes it";
  EXPECT_EQ(t.at(x + "gate_up_proj_bias").shape, (Shape{e, 2 * i}));
  EXPECT_EQ(t.at(x + "down_proj_bias").shape, (Shape{e, h}));
  EXPECT_EQ(t.at("model.layers.0.self_attn.sinks").shape, Shape{c.at("num_attention_heads").get<uint64_t>()});
  EXPECT_FALSE(c.contains("quantization_config"));

  testing::TempDir dir;
  make_tiny({.arch = "gpt_oss", .out = dir.path().string(), .quant = "mxfp4"});
  const json mx = json::parse(testing::read_file(dir.file("config.json")));
  EXPECT_EQ(mx.at("quantization_config").at("quant_method"), "mxfp4");
  const json index = json::parse(testing::read_file(dir.file("model.safetensors.index.json")));
  const json& where = index.at("weight_map");
  const SafetensorsFile blocks = SafetensorsFile::open(dir.file(where.at(x + "gate_up_proj_blocks").get<std::string>()));
  const TensorInfo* codes = blocks.header().find(x + "gate_up_proj_blocks");
  ASSERT_NE(codes, nullptr);
  EXPECT_EQ(codes->dtype, DType::kU8);
  EXPECT_EQ(codes->shape, (Shape{e, 2 * i, h / 32, 16})) << "[out, in] in 32-value groups of 16 bytes";
  EXPECT_TRUE(where.contains(x + "down_proj_scales"));
  EXPECT_FALSE(where.contains(x + "gate_up_proj"));
  EXPECT_THROW(make_tiny({.arch = "llama", .out = dir.file("no"), .quant = "mxfp4"}), Error);
  EXPECT_THROW(make_tiny({.arch = "gpt_oss", .out = dir.file("no"), .quant = "fp8"}), Error);
}

TEST(TinyFamilies, Qwen3NextAlternatesLinearAndGatedFullAttentionAndHasAnMtpBlock) {
  Tiny t("qwen3_next");
  const json& c = t.config();
  EXPECT_EQ(c.at("architectures"), json::array({"Qwen3NextForCausalLM"}));
  const int interval = c.at("full_attention_interval");
  const uint64_t h = c.at("hidden_size"), d = c.at("head_dim"), heads = c.at("num_attention_heads");
  const uint64_t nk = c.at("linear_num_key_heads"), nv = c.at("linear_num_value_heads");
  const uint64_t dk = c.at("linear_key_head_dim"), dv = c.at("linear_value_head_dim");
  EXPECT_EQ(nk % 8, 0u) << "whole key-head groups per rank up to tp 8";
  EXPECT_EQ(nv % nk, 0u);
  const int layers = c.at("num_hidden_layers");
  int linear = 0;
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool full = (i + 1) % interval == 0;
    linear += !full;
    EXPECT_EQ(t.has(p + "self_attn.q_proj.weight"), full) << i;
    EXPECT_EQ(t.has(p + "linear_attn.in_proj_qkvz.weight"), !full) << i;
    if (full) {
      EXPECT_EQ(t.at(p + "self_attn.q_proj.weight").shape, (Shape{2 * heads * d, h})) << "query and gate";
    } else {
      EXPECT_EQ(t.at(p + "linear_attn.in_proj_qkvz.weight").shape, (Shape{2 * nk * dk + 2 * nv * dv, h}));
      EXPECT_EQ(t.at(p + "linear_attn.conv1d.weight").shape, (Shape{2 * nk * dk + nv * dv, 1, 4}));
      EXPECT_EQ(t.at(p + "linear_attn.A_log").shape, Shape{nv});
      EXPECT_EQ(t.at(p + "linear_attn.in_proj_ba.weight").shape, (Shape{2 * nv, h}));
    }
    EXPECT_TRUE(t.has(p + "mlp.shared_expert_gate.weight")) << i;
  }
  EXPECT_GT(linear, 0);
  EXPECT_LT(linear, layers);
  EXPECT_TRUE(t.has("mtp.fc.weight"));
  EXPECT_TRUE(t.has("mtp.layers.0.self_attn.q_proj.weight"));
}

TEST(TinyFamilies, LayersAndExpertsOverrideTheCounts) {
  Tiny small("qwen3_moe");
  Tiny big("qwen3_moe", 6, 16);
  EXPECT_EQ(big.config().at("num_hidden_layers"), 6);
  EXPECT_EQ(big.config().at("num_experts"), 16);
  EXPECT_TRUE(big.has("model.layers.5.mlp.experts.15.gate_proj.weight"));
  EXPECT_FALSE(big.has("model.layers.5.mlp.experts.16.gate_proj.weight"));
  // 5 MoE layers x 16 experts x 3 projections, against 3 x 8 x 3.
  EXPECT_EQ(big.count_containing("mlp.experts."), 5u * 16 * 3);
  EXPECT_EQ(small.count_containing("mlp.experts."), 3u * 8 * 3);
}

// (An expert count for a dense family is an error: options_test.cc.)
TEST(TinyFamilies, DenseFamiliesTakeALayerCount) {
  Tiny t("llama", 2);
  EXPECT_EQ(t.config().at("num_hidden_layers"), 2);
  EXPECT_EQ(t.count_containing("experts"), 0u);
}

TEST(TinyFamilies, ManyExpertsMakeManyTensors) {
  Tiny t("deepseek_v3", 4, 64);
  // Layers 1..3 and the MTP layer are MoE: 4 x 64 x 3 expert tensors.
  EXPECT_EQ(t.count_containing("mlp.experts."), 4u * 64 * 3);
  EXPECT_EQ(t.config().at("n_routed_experts"), 64);
}

TEST(TinyFamilies, TokenizerCoversTheVocabulary) {
  testing::TempDir dir;
  make_tiny({.arch = "llama", .out = dir.path().string()});
  const json tokenizer = json::parse(testing::read_file(dir.file("tokenizer.json")));
  const json config = json::parse(testing::read_file(dir.file("config.json")));
  EXPECT_EQ(tokenizer.at("model").at("type"), "WordLevel");
  EXPECT_EQ(tokenizer.at("model").at("vocab").size(), config.at("vocab_size").get<size_t>());
  const json special = json::parse(testing::read_file(dir.file("special_tokens_map.json")));
  EXPECT_EQ(tokenizer.at("model").at("vocab").at(special.at("eos_token").get<std::string>()),
            config.at("eos_token_id"));
  const json generation = json::parse(testing::read_file(dir.file("generation_config.json")));
  EXPECT_EQ(generation.at("eos_token_id"), config.at("eos_token_id"));
}

}  // namespace
}  // namespace shardload
