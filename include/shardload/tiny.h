#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardload {

// Options of `shardload make-tiny`: a small but realistic Hugging Face checkpoint (real tensor names,
// config.json, model.safetensors.index.json, tokenizer files, several shards) for one architecture family.
struct TinyOptions {
  std::string arch = {};   // a family name, one of tiny_architectures() (src/model/arch/registry.cc)
  std::string out = {};    // output directory (created)
  uint64_t seed = 0;
  int layers = -1;         // -1: the family's default
  int experts = -1;        // -1: the family's default (an error for dense families)
  uint64_t size_bytes = 0; // 0: tiny; otherwise grow hidden/intermediate sizes to reach about this many bytes
  bool overwrite = false;  // a non-empty out is refused unless set; then its shards, index and config go first
  // Weight format: "none" (bf16), "fp8" (F8_E4M3 projections with a float32 weight_scale each,
  // AutoFP8 / vLLM) or "fp8-block" (F8_E4M3 projections with float32 weight_scale_inv per 128x128
  // block, DeepSeek-V3; the family's default sizes then change so that TP splits fall on whole
  // blocks, and size_bytes is refused).
  std::string quant = "none";
  // "fp8" only: "static" (the default when empty: an input_scale per projection) or "dynamic". Any
  // value with another quant is refused.
  std::string activation_scheme = {};
  // Every decoder layer MoE (no mlp_only_layers, first_k_dense_replace 0), as real Qwen3-MoE
  // checkpoints are: some engines' models (SGLang's Qwen3-MoE) hold no dense layer. Refused for a
  // dense family.
  bool every_layer_moe = false;
  // A real model's config.json (make-tiny --config): the checkpoint gets that model's tensor names
  // and full shapes (family from architectures[0], sizes, counts, quantization_config), shards of
  // about 5 GB as on the Hub, and that file byte for byte as its config.json (no tokenizer files).
  // Needs sparse; refused with arch, layers, experts, size_bytes, quant, activation_scheme or
  // every_layer_moe.
  std::string config = {};
  // Write the safetensors headers and the index only: every shard's data section is a hole (reads
  // as zeros, takes no disk blocks), so that plan and inspect run on a real model's geometry.
  bool sparse = false;
};

struct TinySummary {
  std::string dir;
  size_t files = 0;   // every file written: shards, index, config, tokenizer and generation files
  size_t shards = 0;  // model-*-of-*.safetensors files
  size_t tensors = 0;
  uint64_t bytes = 0;  // tensor data bytes
};

// The family names --arch accepts, in a fixed order.
const std::vector<std::string>& tiny_architectures();
// Whether make-tiny writes FP8 checkpoints (--quant) of family `arch` (Llama-4: not yet).
bool tiny_writes_fp8(std::string_view arch);

// The config.json make_tiny(options) would write (options.arch and its sizing options; out unused), or
// the same refusal (an unknown arch, a format the family has no checkpoints of): what the support matrix
// plans each family and format from, without writing anything.
nlohmann::json make_tiny_config(const TinyOptions& options);

// Writes the checkpoint. Throws Error(kInvalidArgument) for an unknown arch or quant, an activation
// scheme without fp8, bad counts, config without sparse or with a sizing option, or a non-empty out
// without overwrite; Error(kConfig) for a config that cannot be read or generated; Error(kIo) when
// a file cannot be written.
TinySummary make_tiny(const TinyOptions& options);

}  // namespace shardload
