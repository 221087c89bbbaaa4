#pragma once

// Small checkpoints written by the tests themselves (config.json + model.safetensors), for what the
// tiny families do not have: row-parallel biases, sizes chosen to break a divisibility rule, and
// extra, missing or mis-shaped tensors.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "shardload/convert.h"
#include "shardload/safetensors.h"
#include "shardload/tensor.h"
#include "temp_dir.h"

namespace shardload::testing {

struct HandTensor {
  enum class Kind { kWeight, kNorm, kBias };
  std::string name;
  Shape shape;
  Kind kind = Kind::kWeight;
  DType dtype = DType::kBF16;
};

// A Llama with q/k/v/o biases (attention_bias) and MLP biases (mlp_bias): o_proj.bias and
// down_proj.bias are row-parallel, which no tiny family has. 6 heads over 3 kv heads and a
// vocabulary of 150 (padded to 192) make tp 3 and tp 6 legal, so --row-bias divided divides by a
// number that is not a power of two, and at tp 6 the last rank's embedding rows are all padding.
inline nlohmann::json biased_llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 48},
          {"intermediate_size", 96},
          {"num_attention_heads", 6},
          {"num_key_value_heads", 3},
          {"head_dim", 8},
          {"num_hidden_layers", 2},
          {"vocab_size", 150},
          {"tie_word_embeddings", false},
          {"attention_bias", true},
          {"mlp_bias", true},
          {"rms_norm_eps", 1e-5},
          {"torch_dtype", "bfloat16"}};
}

// A Qwen3-MoE whose every layer has experts, with an expert intermediate size of 18: moe tp 2
// divides it, moe tp 4 does not.
inline nlohmann::json odd_expert_qwen3_moe_config() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}},
          {"model_type", "qwen3_moe"},
          {"hidden_size", 32},
          {"intermediate_size", 64},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 8},
          {"num_hidden_layers", 2},
          {"vocab_size", 100},
          {"tie_word_embeddings", false},
          {"num_experts", 4},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 18},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", nlohmann::json::array()},
          {"torch_dtype", "bfloat16"}};
}

// A Llama whose config.json leaves num_key_value_heads and head_dim to their defaults (6 kv heads
// of 8), stored in float16 and saying so with the newer "dtype" key (no torch_dtype), with tied
// embeddings but an lm_head in the checkpoint all the same (to be skipped).
inline nlohmann::json plain_llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 48},
          {"intermediate_size", 96},
          {"num_attention_heads", 6},
          {"num_hidden_layers", 2},
          {"vocab_size", 150},
          {"tie_word_embeddings", true},
          {"rms_norm_eps", 1e-5},
          {"dtype", "float16"}};
}

// The checkpoint tensors of the configs above, named as Hugging Face names them, in `dtype` (the
// rotary buffer stays float32).
inline std::vector<HandTensor> handmade_tensors(const nlohmann::json& c,
                                                DType dtype = DType::kBF16) {
  using Kind = HandTensor::Kind;
  const uint64_t h = c.at("hidden_size");
  const uint64_t heads = c.at("num_attention_heads");
  const uint64_t d = c.value("head_dim", h / heads);
  const uint64_t q = heads * d;
  const uint64_t kv = c.value("num_key_value_heads", heads) * d;
  const uint64_t inter = c.at("intermediate_size");
  const uint64_t vocab = c.at("vocab_size");
  const bool attention_bias = c.value("attention_bias", false);
  const bool mlp_bias = c.value("mlp_bias", false);
  const bool moe = c.contains("num_experts");
  std::vector<HandTensor> t = {{"model.embed_tokens.weight", {vocab, h}},
                               {"model.norm.weight", {h}, Kind::kNorm}};
  if (!c.value("tie_word_embeddings", false)) t.push_back({"lm_head.weight", {vocab, h}});
  for (int layer = 0; layer < c.at("num_hidden_layers").get<int>(); ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    t.push_back({p + "input_layernorm.weight", {h}, Kind::kNorm});
    t.push_back({p + "post_attention_layernorm.weight", {h}, Kind::kNorm});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    t.push_back({p + "self_attn.o_proj.weight", {h, q}});
    // A rotary buffer, as older Llama checkpoints carry: skipped by rule.
    t.push_back({p + "self_attn.rotary_emb.inv_freq", {d / 2}, Kind::kNorm, DType::kF32});
    if (attention_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, Kind::kBias});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, Kind::kBias});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, Kind::kBias});
      t.push_back({p + "self_attn.o_proj.bias", {h}, Kind::kBias});
    }
    if (moe) {
      t.push_back({p + "self_attn.q_norm.weight", {d}, Kind::kNorm});
      t.push_back({p + "self_attn.k_norm.weight", {d}, Kind::kNorm});
      const uint64_t experts = c.at("num_experts");
      const uint64_t im = c.at("moe_intermediate_size");
      t.push_back({p + "mlp.gate.weight", {experts, h}});
      for (uint64_t x = 0; x < experts; ++x) {
        const std::string e = p + "mlp.experts." + std::to_string(x) + ".";
        t.push_back({e + "gate_proj.weight", {im, h}});
        t.push_back({e + "up_proj.weight", {im, h}});
        t.push_back({e + "down_proj.weight", {h, im}});
      }
      continue;
    }
    t.push_back({p + "mlp.gate_proj.weight", {inter, h}});
    t.push_back({p + "mlp.up_proj.weight", {inter, h}});
    t.push_back({p + "mlp.down_proj.weight", {h, inter}});
    if (mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", {inter}, Kind::kBias});
      t.push_back({p + "mlp.up_proj.bias", {inter}, Kind::kBias});
      t.push_back({p + "mlp.down_proj.bias", {h}, Kind::kBias});
    }
  }
  for (HandTensor& tensor : t) {
    if (!tensor.name.ends_with("inv_freq")) tensor.dtype = dtype;
  }
  return t;
}

// Values that casts get wrong: signed zeros, infinities, NaN, float16's largest finite value and
// the first value past it that rounds to infinity, float16 and bfloat16 subnormals and underflow,
// float32 values exactly halfway between two bfloat16 (1 + 2^-8) or two float16 (1 + 2^-11, 1 + 3 *
// 2^-11) values, and the largest float32.
inline constexpr float kSpecialValues[] = {
    0.0f,     -0.0f,          INFINITY,        -INFINITY,       NAN,
    65504.0f, 65520.0f,       -65520.0f,       5.9604645e-8f,   2.9802322e-8f,
    1e-9f,    1.0f + 0x1p-8f, -1.0f - 0x1p-8f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
    1e-40f,   -1e-41f,        3.4028235e38f,
};

// Writes config.json, model.safetensors (seeded normal values: weights around 0, norms around 1,
// biases wide enough that dividing them rounds; with `special`, one value in 8 from kSpecialValues)
// and the side files an export must copy or ignore.
inline void write_handmade(const std::string& dir, const nlohmann::json& config,
                           const std::vector<HandTensor>& tensors, uint64_t seed,
                           bool special = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<size_t> pick(0, 8 * std::size(kSpecialValues) - 1);
  std::vector<std::vector<std::byte>> data;
  std::vector<TensorToWrite> to_write;
  data.reserve(tensors.size());
  for (const HandTensor& t : tensors) {
    const uint64_t n = shape_numel(t.shape);
    std::vector<float> values(n);
    for (float& v : values) {
      switch (t.kind) {
        case HandTensor::Kind::kWeight:
          v = 0.05f * normal(rng);
          break;
        case HandTensor::Kind::kNorm:
          v = 1.0f + 0.1f * normal(rng);
          break;
        case HandTensor::Kind::kBias:
          v = 0.5f * normal(rng);
          break;
      }
      if (special) {
        const size_t k = pick(rng);
        if (k < std::size(kSpecialValues)) v = kSpecialValues[k];
      }
    }
    std::vector<std::byte>& bytes = data.emplace_back(shape_nbytes(t.shape, t.dtype));
    if (t.dtype == DType::kI32) {  // packed integer words: any bits
      for (uint64_t i = 0; i < n; ++i) {
        const auto word = static_cast<int32_t>(values[i] * 1e9f);
        std::memcpy(bytes.data() + 4 * i, &word, 4);
      }
    } else if (t.dtype == DType::kU8) {  // packed FP4 codes: any
      for (uint64_t i = 0; i < n; ++i) {
        const auto code = static_cast<uint8_t>(static_cast<int32_t>(values[i] * 1e6f));
        std::memcpy(bytes.data() + i, &code, 1);
      }
    } else if (t.dtype == DType::kI8) {  // int8 codes: any
      for (uint64_t i = 0; i < n; ++i) {
        const auto code = static_cast<int8_t>(static_cast<int32_t>(values[i] * 1e6f));
        std::memcpy(bytes.data() + i, &code, 1);
      }
    } else if (t.dtype == DType::kI64) {  // a packed weight's [N, K]: set by the caller's values
      for (uint64_t i = 0; i < n; ++i) {
        const auto value = static_cast<int64_t>(values[i]);
        std::memcpy(bytes.data() + 8 * i, &value, 8);
      }
    } else {
      convert(DType::kF32, values.data(), t.dtype, bytes.data(), n);
    }
    to_write.push_back({t.name, t.dtype, t.shape, bytes});
  }
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", to_write, {{"format", "pt"}});
  write_file(dir + "/config.json", config.dump(2));
  write_file(dir + "/generation_config.json", R"({"bos_token_id": 1, "eos_token_id": 2})");
  write_file(dir + "/tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE"}})");
  // Not copied by an export: weights in other formats and subdirectories.
  write_file(dir + "/training_args.bin", "not a model file");
  std::filesystem::create_directories(dir + "/original");
  write_file(dir + "/original/params.json", "{}");
}

// Rewrites a sharded checkpoint (model.safetensors.index.json) without the tensors whose names
// contain `part`, dropping them from the index too.
inline void drop_tensors(const std::string& dir, const std::string& part) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  nlohmann::json index = nlohmann::json::parse(read_file(index_path));
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items())
    files.insert(file.get<std::string>());
  for (const std::string& file : files) {
    const SafetensorsFile in = SafetensorsFile::open(dir + "/" + file);
    std::vector<std::vector<std::byte>> data;
    data.reserve(in.header().tensors.size());
    std::vector<TensorToWrite> kept;
    for (const TensorInfo& info : in.header().tensors) {
      if (info.name.find(part) != std::string::npos) continue;
      std::vector<std::byte>& bytes = data.emplace_back(info.nbytes());
      in.read(info, bytes);
      kept.push_back({info.name, info.dtype, info.shape, bytes});
    }
    write_safetensors(dir + "/" + file, kept, in.header().metadata);
  }
  nlohmann::json& map = index.at("weight_map");
  for (auto it = map.begin(); it != map.end();) {
    it = it.key().find(part) != std::string::npos ? map.erase(it) : std::next(it);
  }
  write_file(index_path, index.dump(2));
}

}  // namespace shardload::testing
