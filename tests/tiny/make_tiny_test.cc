// End-to-end tests of make_tiny: the directory it writes is a consistent Hugging Face checkpoint
// whose tensor shapes follow from config.json alone (re-derived here, independently of the
// generator).

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shardload/convert.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

constexpr const char* kIndex = "model.safetensors.index.json";

struct Checkpoint {
  json config;
  json index;
  std::map<std::string, TensorInfo> tensors;   // from the shard headers
  std::map<std::string, std::string> file_of;  // the shard each tensor was found in
  std::vector<std::string> shards;
  // Kimi-K2.5 (a multimodal class whose text model is under language_model.): config is its
  // text_config with the outer class and model_type, tensors are by their text-model names, and
  // stored_name gives each one's name in the files.
  std::string prefix;
  std::map<std::string, std::string> stored_name;
  const std::string& stored(const std::string& name) const {
    const auto it = stored_name.find(name);
    return it == stored_name.end() ? name : it->second;
  }
};

// A multimodal class that make-tiny writes as such: its text model's prefix in the files.
std::string multimodal_prefix(const json& config) {
  return config.at("architectures")[0] == "KimiK25ForConditionalGeneration" ? "language_model." : "";
}

json read_json(const fs::path& path) { return json::parse(testing::read_file(path.string())); }

Checkpoint load(const fs::path& dir) {
  Checkpoint c;
  c.config = read_json(dir / "config.json");
  c.index = read_json(dir / kIndex);
  c.prefix = multimodal_prefix(c.config);
  if (!c.prefix.empty()) {
    json text = c.config.at("text_config");
    for (const char* key : {"architectures", "model_type", "tie_word_embeddings", "torch_dtype"}) {
      text[key] = c.config.at(key);
    }
    c.config = std::move(text);
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string name = entry.path().filename().string();
    c.shards.push_back(name);
    SafetensorsFile file = SafetensorsFile::open(entry.path().string());
    for (const TensorInfo& info : file.header().tensors) {
      std::string text_name = info.name;
      if (!c.prefix.empty()) {
        EXPECT_TRUE(text_name.starts_with(c.prefix)) << text_name;
        text_name.erase(0, c.prefix.size());
        c.stored_name[text_name] = info.name;
      }
      EXPECT_TRUE(c.tensors.emplace(text_name, info).second) << info.name << " is in two shards";
      c.file_of[text_name] = name;
    }
  }
  std::sort(c.shards.begin(), c.shards.end());
  return c;
}

std::vector<std::byte> read_tensor(const fs::path& dir, const Checkpoint& c,
                                   const std::string& name) {
  SafetensorsFile file = SafetensorsFile::open((dir / c.file_of.at(name)).string());
  const TensorInfo* info = file.header().find(c.stored(name));
  std::vector<std::byte> bytes(info->nbytes());
  file.read(*info, bytes);
  return bytes;
}

std::vector<float> read_floats(const fs::path& dir, const Checkpoint& c, const std::string& name) {
  const std::vector<std::byte> bytes = read_tensor(dir, c, name);
  const DType dtype = c.tensors.at(name).dtype;
  std::vector<float> values(bytes.size() / (dtype_bits(dtype) / 8));
  convert(dtype, bytes.data(), DType::kF32, values.data(), values.size());
  return values;
}

uint64_t u(const json& config, const char* key) { return config.at(key).get<uint64_t>(); }

// The config-derived sizes a tensor shape may use.
struct Dims {
  uint64_t h, v, hq, hkv, d, i, e = 0, im = 0, shared = 0;
  bool mla = false;
  uint64_t q_lora = 0, kv_lora = 0, nope = 0, rope = 0, vd = 0;
  uint64_t index_heads = 0, index_dim = 0;  // DeepSeek-V3.2's indexer
  bool per_layer_qk_norm = false;          // MiniMax-M2: q/k norms over the whole projection
  uint64_t i_mlp = 0;                      // Llama-4's dense layers (intermediate_size: the experts')
  bool gated_q = false;                    // Qwen3-Next: q_proj holds each head's query and gate
  uint64_t lk = 0, lv = 0, ldk = 0, ldv = 0, conv = 0;  // Qwen3-Next's linear attention
};

Dims dims(const json& c) {
  Dims d{.h = u(c, "hidden_size"),
         .v = u(c, "vocab_size"),
         .hq = u(c, "num_attention_heads"),
         .hkv = c.contains("num_key_value_heads") ? u(c, "num_key_value_heads")
                                                  : u(c, "num_attention_heads"),
         .d = 0,
         .i = u(c, "intermediate_size")};
  d.d = c.contains("head_dim") ? u(c, "head_dim") : d.h / d.hq;
  for (const char* key :
       {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}) {
    if (c.contains(key)) d.e = u(c, key);
  }
  d.im = c.contains("moe_intermediate_size") ? u(c, "moe_intermediate_size") : d.i;
  if (c.contains("shared_expert_intermediate_size"))
    d.shared = u(c, "shared_expert_intermediate_size");
  if (c.contains("n_shared_experts")) d.shared = u(c, "n_shared_experts") * d.im;
  if (c.contains("moe_num_shared_experts")) d.shared = u(c, "moe_num_shared_experts") * d.im;
  d.mla = c.contains("kv_lora_rank");
  if (d.mla) {
    d.q_lora = c.at("q_lora_rank").is_null() ? 0 : u(c, "q_lora_rank");
    d.kv_lora = u(c, "kv_lora_rank");
    d.nope = u(c, "qk_nope_head_dim");
    d.rope = u(c, "qk_rope_head_dim");
    d.vd = u(c, "v_head_dim");
  }
  d.per_layer_qk_norm = c.value("qk_norm_type", "") == "per_layer";
  if (c.contains("intermediate_size_mlp")) {
    d.i_mlp = u(c, "intermediate_size_mlp");
    d.shared = d.im;  // Llama-4's one shared expert is as wide as a routed one
  }
  const std::string type = c.value("model_type", "");
  if (type == "qwen3_next" || type == "qwen3_5_text" || type == "qwen3_5_moe_text") {
    d.gated_q = true;
    d.lk = u(c, "linear_num_key_heads");
    d.lv = u(c, "linear_num_value_heads");
    d.ldk = u(c, "linear_key_head_dim");
    d.ldv = u(c, "linear_value_head_dim");
    d.conv = u(c, "linear_conv_kernel_dim");
  }
  if (c.contains("index_n_heads")) {
    d.index_heads = u(c, "index_n_heads");
    d.index_dim = u(c, "index_head_dim");
  }
  return d;
}

// "<prefix><digits>.<rest>" -> index and rest.
bool split_indexed(std::string_view name, std::string_view prefix, uint64_t& index,
                   std::string& rest) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  const std::string_view digits = name.substr(0, dot);
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
  index = std::stoull(std::string(digits));
  rest = std::string(name.substr(dot + 1));
  return true;
}

// Shape of `rest` (a name inside a decoder layer, e.g. "self_attn.q_proj.weight"); nullopt if
// unknown.
std::optional<Shape> layer_shape(const Dims& d, const std::string& rest) {
  const uint64_t q_rows = d.mla ? d.hq * (d.nope + d.rope) : d.hq * d.d * (d.gated_q ? 2 : 1);
  const uint64_t keys = d.lk * d.ldk;
  const uint64_t values = d.lv * d.ldv;
  const std::map<std::string, Shape> fixed = {
      {"input_layernorm.weight", {d.h}},
      {"post_attention_layernorm.weight", {d.h}},
      {"self_attn.q_proj.weight", {q_rows, d.h}},
      {"self_attn.k_proj.weight", {d.hkv * d.d, d.h}},
      {"self_attn.v_proj.weight", {d.hkv * d.d, d.h}},
      {"self_attn.q_proj.bias", {d.hq * d.d}},
      {"self_attn.k_proj.bias", {d.hkv * d.d}},
      {"self_attn.v_proj.bias", {d.hkv * d.d}},
      {"self_attn.o_proj.weight", {d.h, d.mla ? d.hq * d.vd : d.hq * d.d}},
      {"self_attn.q_norm.weight", {d.per_layer_qk_norm ? d.hq * d.d : d.d}},
      {"self_attn.k_norm.weight", {d.per_layer_qk_norm ? d.hkv * d.d : d.d}},
      {"block_sparse_moe.e_score_correction_bias", {d.e}},
      {"self_attn.q_a_proj.weight", {d.q_lora, d.h}},
      {"self_attn.q_a_layernorm.weight", {d.q_lora}},
      {"self_attn.q_b_proj.weight", {q_rows, d.q_lora}},
      {"self_attn.kv_a_proj_with_mqa.weight", {d.kv_lora + d.rope, d.h}},
      {"self_attn.kv_a_layernorm.weight", {d.kv_lora}},
      {"self_attn.kv_b_proj.weight", {d.hq * (d.nope + d.vd), d.kv_lora}},
      {"self_attn.indexer.wq_b.weight", {d.index_heads * d.index_dim, d.q_lora}},
      {"self_attn.indexer.wk.weight", {d.index_dim, d.h}},
      {"self_attn.indexer.k_norm.weight", {d.index_dim}},
      {"self_attn.indexer.k_norm.bias", {d.index_dim}},
      {"self_attn.indexer.weights_proj.weight", {d.index_heads, d.h}},
      {"mlp.gate_proj.weight", {d.i, d.h}},
      {"mlp.up_proj.weight", {d.i, d.h}},
      {"mlp.down_proj.weight", {d.h, d.i}},
      {"mlp.gate.weight", {d.e, d.h}},
      {"block_sparse_moe.gate.weight", {d.e, d.h}},
      {"mlp.gate.e_score_correction_bias", {d.e}},
      {"mlp.moe_statics.e_score_correction_bias", {1, d.e}},
      {"mlp.shared_expert.gate_proj.weight", {d.shared, d.h}},
      {"mlp.shared_expert.up_proj.weight", {d.shared, d.h}},
      {"mlp.shared_expert.down_proj.weight", {d.h, d.shared}},
      {"mlp.shared_expert_gate.weight", {1, d.h}},
      {"mlp.shared_experts.gate_proj.weight", {d.shared, d.h}},
      {"mlp.shared_experts.up_proj.weight", {d.shared, d.h}},
      {"mlp.shared_experts.down_proj.weight", {d.h, d.shared}},
      // Llama-4: everything under feed_forward, experts fused [E, in, out].
      {"feed_forward.router.weight", {d.e, d.h}},
      {"feed_forward.experts.gate_up_proj", {d.e, d.h, 2 * d.im}},
      {"feed_forward.experts.down_proj", {d.e, d.im, d.h}},
      {"feed_forward.shared_expert.gate_proj.weight", {d.shared, d.h}},
      {"feed_forward.shared_expert.up_proj.weight", {d.shared, d.h}},
      {"feed_forward.shared_expert.down_proj.weight", {d.h, d.shared}},
      {"feed_forward.gate_proj.weight", {d.i_mlp, d.h}},
      {"feed_forward.up_proj.weight", {d.i_mlp, d.h}},
      {"feed_forward.down_proj.weight", {d.h, d.i_mlp}},
      // gpt-oss: sinks, an o bias, a biased router and fused [in, out] experts with biases.
      {"self_attn.sinks", {d.hq}},
      {"self_attn.o_proj.bias", {d.h}},
      {"mlp.router.weight", {d.e, d.h}},
      {"mlp.router.bias", {d.e}},
      {"mlp.experts.gate_up_proj", {d.e, d.h, 2 * d.im}},
      {"mlp.experts.gate_up_proj_bias", {d.e, 2 * d.im}},
      {"mlp.experts.down_proj", {d.e, d.im, d.h}},
      {"mlp.experts.down_proj_bias", {d.e, d.h}},
      {"linear_attn.in_proj_qkvz.weight", {2 * keys + 2 * values, d.h}},
      {"linear_attn.in_proj_ba.weight", {2 * d.lv, d.h}},
      // Qwen3.5: the same projections stored apart.
      {"linear_attn.in_proj_qkv.weight", {2 * keys + values, d.h}},
      {"linear_attn.in_proj_z.weight", {values, d.h}},
      {"linear_attn.in_proj_b.weight", {d.lv, d.h}},
      {"linear_attn.in_proj_a.weight", {d.lv, d.h}},
      {"linear_attn.conv1d.weight", {2 * keys + values, 1, d.conv}},
      {"linear_attn.A_log", {d.lv}},
      {"linear_attn.dt_bias", {d.lv}},
      {"linear_attn.norm.weight", {d.ldv}},
      {"linear_attn.out_proj.weight", {d.h, values}},
      // DeepSeek MTP layer extras.
      {"embed_tokens.weight", {d.v, d.h}},
      {"enorm.weight", {d.h}},
      {"hnorm.weight", {d.h}},
      {"eh_proj.weight", {d.h, 2 * d.h}},
      {"shared_head.norm.weight", {d.h}},
      {"shared_head.head.weight", {d.v, d.h}},
  };
  if (auto it = fixed.find(rest); it != fixed.end()) return it->second;
  // "<module>.experts.<x>.<proj>.weight"
  for (const char* module : {"mlp.experts.", "block_sparse_moe.experts."}) {
    uint64_t x = 0;
    std::string proj;
    if (!split_indexed(rest, module, x, proj) || x >= d.e) continue;
    if (proj == "gate_proj.weight" || proj == "up_proj.weight" || proj == "w1.weight" ||
        proj == "w3.weight") {
      return Shape{d.im, d.h};
    }
    if (proj == "down_proj.weight" || proj == "w2.weight") return Shape{d.h, d.im};
  }
  return std::nullopt;
}

// Gemma 4 (gemma4_text): a layer's head size, KV heads and MLP width follow from its kind (full or
// sliding attention, reading an earlier layer's KV cache), restated from transformers' Gemma4TextConfig;
// the per-layer embeddings beside the embedding.
std::optional<Shape> gemma4_shape(const json& c, const std::string& name) {
  const Dims d = dims(c);
  const uint64_t layers = u(c, "num_hidden_layers");
  const uint64_t ple = u(c, "hidden_size_per_layer_input");
  if (name == "model.embed_tokens.weight") return Shape{d.v, d.h};
  if (name == "model.norm.weight") return Shape{d.h};
  if (name == "model.embed_tokens_per_layer.weight") return Shape{u(c, "vocab_size_per_layer_input"), layers * ple};
  if (name == "model.per_layer_model_projection.weight") return Shape{layers * ple, d.h};
  if (name == "model.per_layer_projection_norm.weight") return Shape{ple};
  uint64_t i = 0;
  std::string rest;
  if (!split_indexed(name, "model.layers.", i, rest) || i >= layers) return std::nullopt;
  const bool full = c.at("layer_types").at(i) == "full_attention";
  const uint64_t hd = full ? u(c, "global_head_dim") : d.d;
  const uint64_t kv = (full && c.at("attention_k_eq_v").get<bool>() ? u(c, "num_global_key_value_heads") : d.hkv) * hd;
  const bool shared = i >= layers - u(c, "num_kv_shared_layers");
  const uint64_t mlp = (shared && c.at("use_double_wide_mlp").get<bool>() ? 2 : 1) * d.i;
  const std::map<std::string, Shape> fixed = {
      {"input_layernorm.weight", {d.h}},
      {"post_attention_layernorm.weight", {d.h}},
      {"pre_feedforward_layernorm.weight", {d.h}},
      {"post_feedforward_layernorm.weight", {d.h}},
      {"pre_feedforward_layernorm_2.weight", {d.h}},
      {"post_feedforward_layernorm_1.weight", {d.h}},
      {"post_feedforward_layernorm_2.weight", {d.h}},
      {"post_per_layer_input_norm.weight", {d.h}},
      {"layer_scalar", {1}},
      {"self_attn.q_proj.weight", {d.hq * hd, d.h}},
      {"self_attn.k_proj.weight", {kv, d.h}},
      {"self_attn.v_proj.weight", {kv, d.h}},
      {"self_attn.o_proj.weight", {d.h, d.hq * hd}},
      {"self_attn.q_norm.weight", {hd}},
      {"self_attn.k_norm.weight", {hd}},
      {"mlp.gate_proj.weight", {mlp, d.h}},
      {"mlp.up_proj.weight", {mlp, d.h}},
      {"mlp.down_proj.weight", {d.h, mlp}},
      {"router.proj.weight", {d.e, d.h}},
      {"router.scale", {d.h}},
      {"router.per_expert_scale", {d.e}},
      {"experts.gate_up_proj", {d.e, 2 * d.im, d.h}},
      {"experts.down_proj", {d.e, d.h, d.im}},
      {"per_layer_input_gate.weight", {ple, d.h}},
      {"per_layer_projection.weight", {d.h, ple}},
  };
  if (auto it = fixed.find(rest); it != fixed.end()) return it->second;
  return std::nullopt;
}

// Shape of any checkpoint tensor from config.json alone; nullopt for a name the family does not
// have.
std::optional<Shape> expected_shape(const json& c, const std::string& name) {
  if (c.value("model_type", "") == "gemma4_text") return gemma4_shape(c, name);
  const Dims d = dims(c);
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return Shape{d.v, d.h};
  if (name == "model.norm.weight") return Shape{d.h};
  uint64_t index = 0;
  std::string rest;
  if (split_indexed(name, "model.layers.", index, rest)) return layer_shape(d, rest);
  if (split_indexed(name, "model.mtp_block.", index, rest)) return layer_shape(d, rest);
  // Qwen3-Next's multi-token-prediction block.
  if (split_indexed(name, "mtp.layers.", index, rest)) return layer_shape(d, rest);
  if (name == "mtp.fc.weight") return Shape{d.h, 2 * d.h};
  for (const char* norm : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"}) {
    if (name == norm) return Shape{d.h};
  }
  if (split_indexed(name, "model.mtp_linear_proj.", index, rest) && rest == "weight") {
    return Shape{d.h, 2 * d.h};
  }
  for (const char* norm : {"model.mtp_emb_norm.", "model.mtp_hidden_norm."}) {
    if (split_indexed(name, norm, index, rest) && rest == "weight") return Shape{d.h};
  }
  return std::nullopt;
}

// The MoE-layer rule of each family, restated from the layout contract.
bool is_moe(const json& c, int i) {
  const std::string type = c.at("model_type");
  const int layers = c.at("num_hidden_layers");
  if (type == "mixtral" || type == "minimax_m2" || type == "gpt_oss") return true;
  if (type == "qwen2_moe" || type == "qwen3_moe" || type == "qwen3_next") {
    const std::vector<int> only = c.at("mlp_only_layers");
    return u(c, "num_experts") > 0 && std::find(only.begin(), only.end(), i) == only.end() &&
           (i + 1) % c.at("decoder_sparse_step").get<int>() == 0;
  }
  if (type == "deepseek_v2" || type == "deepseek_v3" || type == "deepseek_v32" || type == "kimi_k25") {
    return i >= c.at("first_k_dense_replace").get<int>() &&
           i % c.at("moe_layer_freq").get<int>() == 0;
  }
  if (type == "glm4_moe") return i >= c.at("first_k_dense_replace").get<int>();
  // GLM's latent-attention families: transformers' mlp_layer_types, which must say what vLLM's
  // first_k_dense_replace says.
  if (type == "glm4_moe_lite" || type == "glm_moe_dsa") {
    const bool sparse = c.at("mlp_layer_types").at(i) == "sparse";
    EXPECT_EQ(sparse, i >= c.at("first_k_dense_replace").get<int>()) << type << " layer " << i;
    return sparse;
  }
  if (type == "qwen3_5_moe_text") return u(c, "num_experts") > 0;  // every layer
  if (type == "gemma4_text") return c.at("enable_moe_block").get<bool>();  // every layer

  if (type == "llama4_text") return (i + 1) % c.at("interleave_moe_layer_step").get<int>() == 0;
  if (type == "ernie4_5_moe") {
    const int end =
        c.contains("moe_layer_end_index") ? c.at("moe_layer_end_index").get<int>() : layers - 1;
    return u(c, "moe_num_experts") > 0 && (i + 1) % c.at("moe_layer_interval").get<int>() == 0 &&
           i >= c.at("moe_layer_start_index").get<int>() && i <= end;
  }
  return false;
}

const std::map<std::string, std::string> kArchitectures = {
    {"llama", "LlamaForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
    {"qwen2_moe", "Qwen2MoeForCausalLM"},
    {"qwen3_moe", "Qwen3MoeForCausalLM"},
    {"mixtral", "MixtralForCausalLM"},
    {"deepseek_v2", "DeepseekV2ForCausalLM"},
    {"deepseek_v3", "DeepseekV3ForCausalLM"},
    {"deepseek_v32", "DeepseekV32ForCausalLM"},
    {"ernie4_5_moe", "Ernie4_5_MoeForCausalLM"},
    {"glm4_moe", "Glm4MoeForCausalLM"},
    {"minimax_m2", "MiniMaxM2ForCausalLM"},
    {"llama4", "Llama4ForCausalLM"},
    {"gpt_oss", "GptOssForCausalLM"},
    {"qwen3_next", "Qwen3NextForCausalLM"},
    {"glm4_moe_lite", "Glm4MoeLiteForCausalLM"},
    {"glm_moe_dsa", "GlmMoeDsaForCausalLM"},
    {"qwen3_5", "Qwen3_5ForCausalLM"},
    {"qwen3_5_moe", "Qwen3_5MoeForCausalLM"},
    {"gemma4", "Gemma4ForCausalLM"},
    {"kimi_k25", "KimiK25ForConditionalGeneration"},
    {"deepseek_v4", "DeepseekV4ForCausalLM"},
};

// DeepSeek-V4's checkpoints carry DeepSeek's own names (layers.N.attn.wq_a, embed, head), not the Hugging Face
// ones the per-name checks below read: its shapes, layers and values are checked by its own tests
// (tests/shard/deepseek_v4_plan_test.cc, tests/load/deepseek_v4_load_test.cc).
bool own_names(const std::string& arch) { return arch == "deepseek_v4"; }

TinySummary make(const TempDir& dir, const std::string& arch, uint64_t seed = 7) {
  return make_tiny({.arch = arch, .out = dir.path().string(), .seed = seed});
}

bool has(const Checkpoint& c, const std::string& name) { return c.tensors.count(name) > 0; }

class EveryFamily : public ::testing::TestWithParam<std::string> {};

TEST(TinyArchitectures, ListsEveryFamilyOnce) {
  std::vector<std::string> expected;
  for (const auto& [arch, cls] : kArchitectures) expected.push_back(arch);
  std::vector<std::string> got = tiny_architectures();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

TEST_P(EveryFamily, WritesAConsistentCheckpoint) {
  TempDir dir;
  const TinySummary summary = make(dir, GetParam());
  for (const char* file : {"config.json", kIndex, "tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::is_regular_file(dir.path() / file)) << file;
  }
  const Checkpoint c = load(dir.path());
  ASSERT_GE(c.shards.size(), 3u);
  for (size_t k = 0; k < c.shards.size(); ++k) {
    EXPECT_EQ(c.shards[k],
              fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, c.shards.size()));
  }
  EXPECT_EQ(summary.shards, c.shards.size());
  EXPECT_EQ(summary.files, c.shards.size() + 6);
  EXPECT_EQ(summary.tensors, c.tensors.size());

  // The index names every tensor, each in the file that holds it, and counts their bytes.
  const json& weight_map = c.index.at("weight_map");
  EXPECT_EQ(weight_map.size(), c.tensors.size());
  uint64_t total = 0;
  for (const auto& [name, info] : c.tensors) {
    ASSERT_TRUE(weight_map.contains(c.stored(name))) << name;
    EXPECT_EQ(weight_map.at(c.stored(name)).get<std::string>(), c.file_of.at(name)) << name;
    total += info.nbytes();
  }
  EXPECT_EQ(c.index.at("metadata").at("total_size").get<uint64_t>(), total);
  EXPECT_EQ(summary.bytes, total);

  EXPECT_EQ(c.config.at("architectures"), json::array({kArchitectures.at(GetParam())}));
  // Llama4ForCausalLM's config is transformers' llama4_text (llama4 is the multimodal one's), and so
  // are Qwen3.5's and Gemma 4's text classes'.
  const bool text_type = GetParam() == "llama4" || GetParam().starts_with("qwen3_5") || GetParam() == "gemma4";
  EXPECT_EQ(c.config.at("model_type"), text_type ? GetParam() + "_text" : GetParam());
  EXPECT_EQ(c.config.at("torch_dtype"), "bfloat16");
  EXPECT_NE(u(c.config, "vocab_size") % 64, 0u) << "vocab padding must matter";
}

TEST_P(EveryFamily, ShapesFollowFromConfig) {
  if (own_names(GetParam())) GTEST_SKIP() << "DeepSeek's own names: its own tests";
  TempDir dir;
  make(dir, GetParam());
  const Checkpoint c = load(dir.path());
  for (const auto& [name, info] : c.tensors) {
    const std::optional<Shape> shape = expected_shape(c.config, name);
    ASSERT_TRUE(shape.has_value()) << "unexpected tensor " << name;
    EXPECT_EQ(info.shape, *shape) << name;
    const bool f32 = name.find("e_score_correction_bias") != std::string::npos ||
                     (GetParam() == "ernie4_5_moe" && name.ends_with("mlp.gate.weight")) ||
                     (GetParam() == "minimax_m2" && name.ends_with("block_sparse_moe.gate.weight"));
    EXPECT_EQ(info.dtype, f32 ? DType::kF32 : DType::kBF16) << name;
  }
}

TEST_P(EveryFamily, LayersFollowTheMoeRule) {
  if (own_names(GetParam())) GTEST_SKIP() << "DeepSeek's own names: its own tests";
  TempDir dir;
  make(dir, GetParam());
  const Checkpoint c = load(dir.path());
  const int layers = c.config.at("num_hidden_layers");
  const bool tie = c.config.at("tie_word_embeddings");
  EXPECT_EQ(has(c, "lm_head.weight"), !tie);
  EXPECT_TRUE(has(c, "model.embed_tokens.weight"));
  EXPECT_TRUE(has(c, "model.norm.weight"));
  int moe_layers = 0;
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    EXPECT_TRUE(has(c, p + "input_layernorm.weight")) << i;
    const bool routed = has(c, p + "mlp.gate.weight") || has(c, p + "block_sparse_moe.gate.weight") ||
                        has(c, p + "feed_forward.router.weight") || has(c, p + "mlp.router.weight") ||
                        has(c, p + "router.proj.weight");
    EXPECT_EQ(routed, is_moe(c.config, i)) << "layer " << i;
    // Gemma 4's layers keep their dense MLP beside the MoE block.
    const bool dense_beside = GetParam() == "gemma4";
    EXPECT_EQ(has(c, p + "mlp.gate_proj.weight") || has(c, p + "feed_forward.gate_proj.weight"),
              !routed || dense_beside)
        << "layer " << i;
    moe_layers += routed;
  }
  const int mtp = c.config.value("num_nextn_predict_layers", 0);
  const bool moe_family =
      c.config.contains("num_experts") || c.config.contains("num_local_experts") ||
      c.config.contains("n_routed_experts") || c.config.contains("moe_num_experts");
  if (moe_family) {
    EXPECT_GT(moe_layers, 0);
  }
  // Layers past num_hidden_layers exist only as DeepSeek-style MTP layers (DeepSeek-V3, GLM-4.5).
  const std::string past = "model.layers." + std::to_string(layers) + ".";
  const bool deepseek_mtp =
      GetParam() == "deepseek_v3" || GetParam() == "deepseek_v32" || GetParam() == "glm4_moe" ||
      GetParam() == "glm4_moe_lite" || GetParam() == "glm_moe_dsa";
  EXPECT_EQ(has(c, past + "input_layernorm.weight"), deepseek_mtp);
  EXPECT_FALSE(has(c, "model.layers." + std::to_string(layers + mtp) + ".input_layernorm.weight"));
}

TEST_P(EveryFamily, ValuesAreSmallDistinctAndNormsNearOne) {
  if (own_names(GetParam())) GTEST_SKIP() << "DeepSeek's own names: its own tests";
  TempDir dir;
  make(dir, GetParam());
  const Checkpoint c = load(dir.path());
  const std::vector<float> norm =
      read_floats(dir.path(), c, "model.layers.1.input_layernorm.weight");
  for (float x : norm) EXPECT_NEAR(x, 1.0f, 0.06f);
  const std::vector<float> embed = read_floats(dir.path(), c, "model.embed_tokens.weight");
  float lo = 1, hi = -1;
  for (float x : embed) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GE(lo, -0.051f);
  EXPECT_LE(hi, 0.051f);
  EXPECT_LT(lo, -0.02f);
  EXPECT_GT(hi, 0.02f);
  // Same-shaped tensors differ, so a loader that misplaces one is caught (the first two layers with
  // softmax attention: Qwen3-Next's alternate with linear attention).
  std::vector<std::string> o_proj;
  for (int i = 0; o_proj.size() < 2 && i < c.config.at("num_hidden_layers").get<int>(); ++i) {
    const std::string name = "model.layers." + std::to_string(i) + ".self_attn.o_proj.weight";
    if (has(c, name)) o_proj.push_back(name);
  }
  ASSERT_EQ(o_proj.size(), 2u);
  EXPECT_NE(read_tensor(dir.path(), c, o_proj[0]), read_tensor(dir.path(), c, o_proj[1]));
  EXPECT_NE(read_tensor(dir.path(), c, "model.layers.0.input_layernorm.weight"),
            read_tensor(dir.path(), c, "model.layers.0.post_attention_layernorm.weight"));
}

TEST_P(EveryFamily, SameSeedSameBytesOtherSeedOtherValues) {
  TempDir a, b, other;
  make(a, GetParam(), 11);
  make(b, GetParam(), 11);
  make(other, GetParam(), 12);
  const Checkpoint c = load(a.path());
  for (const std::string& shard : c.shards) {
    EXPECT_EQ(testing::read_file((a.path() / shard).string()),
              testing::read_file((b.path() / shard).string()));
    EXPECT_NE(testing::read_file((a.path() / shard).string()),
              testing::read_file((other.path() / shard).string()));
  }
  for (const char* file : {"config.json", kIndex, "tokenizer.json"}) {
    EXPECT_EQ(testing::read_file((a.path() / file).string()),
              testing::read_file((other.path() / file).string()));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, EveryFamily, ::testing::ValuesIn(tiny_architectures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace shardload
