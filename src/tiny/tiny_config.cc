// config.json of a generated model: the fields every family writes, then the family's own
// (its descriptor's tiny_config, src/model/arch/), field names as in its published checkpoints.

#include "tiny/tiny_config.h"

#include <algorithm>
#include <string>

#include "shardload/error.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

namespace {

using nlohmann::json;

// Fields every family writes.
json common(const TinyModel& m) {
  return {
      {"architectures", json::array({std::string(m.family->architectures.front())})},
      {"model_type", std::string(m.family->name)},
      {"hidden_size", m.hidden},
      {"intermediate_size", m.intermediate},
      {"num_attention_heads", m.heads},
      {"num_key_value_heads", m.kv_heads},
      {"num_hidden_layers", m.layers},
      {"vocab_size", m.vocab},
      {"tie_word_embeddings", m.tie_embeddings},
      {"torch_dtype", "bfloat16"},
      {"hidden_act", "silu"},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", kBosTokenId},
      {"eos_token_id", kEosTokenId},
      {"transformers_version", "4.51.0"},
  };
}

// The linear layers the generator leaves in the model dtype (routers, shared-expert gates, the LM
// head): every 2-D weight but the embeddings that is not FP8. Real FP8 checkpoints (Qwen3's) list
// them in modules_to_not_convert; an engine that is not told builds them as FP8 linears and reads
// their bf16 bytes as FP8 codes.
json unquantized_linears(const TinyModel& m) {
  json modules = json::array();
  for (const TensorSpec& spec : model_tensors(m)) {
    if (spec.quant != Quant::kNone || spec.shape.size() != 2 || !spec.name.ends_with(".weight") ||
        spec.name.find("embed_tokens.") != std::string::npos) {
      continue;
    }
    modules.push_back(spec.name.substr(0, spec.name.size() - std::string_view(".weight").size()));
  }
  return modules;
}

// An `ignore` entry for an unquantized linear as llm-compressor's examples write them: lm_head by
// name, a layer's module by a pattern over every layer (re:.*mlp\.gate$).
std::string ignore_entry(const std::string& module) {
  const std::string_view layers = "model.layers.";
  if (!module.starts_with(layers)) return module;
  const size_t dot = module.find('.', layers.size());
  std::string pattern = "re:.*";
  for (char c : std::string_view(module).substr(dot + 1)) {
    if (c == '.') pattern += '\\';
    pattern += c;
  }
  return pattern + "$";
}

// llm-compressor's W4A16 (group 32 here), W4A16_ASYM and W8A16 (channel) schemes: integer weights,
// activations left alone.
json packed_int_group(const TinyModel& m) {
  const bool channel = m.quant == Quant::kCtW8a16;
  json weights = {{"num_bits", channel ? 8 : 4},
                  {"type", "int"},
                  {"symmetric", m.quant != Quant::kCtW4a16Asym},
                  {"strategy", channel ? "channel" : "group"},
                  {"dynamic", false},
                  {"group_size", channel ? json(nullptr) : json(kTinyIntGroup)},
                  {"block_structure", nullptr},
                  {"actorder", nullptr},
                  {"observer", "minmax"},
                  {"observer_kwargs", json::object()}};
  return {{"targets", json::array({"Linear"})},
          {"weights", std::move(weights)},
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"format", "pack-quantized"}};
}

// llm-compressor's W8A8 (int8) scheme: int8 weights per channel, activations int8 per token at run time.
json int8_group() {
  json weights = {{"num_bits", 8},         {"type", "int"},           {"symmetric", true},
                  {"strategy", "channel"}, {"dynamic", false},        {"group_size", nullptr},
                  {"block_structure", nullptr}, {"actorder", nullptr}, {"observer", "minmax"},
                  {"observer_kwargs", json::object()}};
  json inputs = {{"num_bits", 8},         {"type", "int"},    {"symmetric", true},
                 {"strategy", "token"},   {"dynamic", true},  {"group_size", nullptr},
                 {"block_structure", nullptr}, {"actorder", nullptr}, {"observer", nullptr},
                 {"observer_kwargs", json::object()}};
  return {{"targets", json::array({"Linear"})},
          {"weights", std::move(weights)},
          {"input_activations", std::move(inputs)},
          {"output_activations", nullptr},
          {"format", "int-quantized"}};
}

// llm-compressor's NVFP4 scheme: FP4 weights and activations in 16-value groups under global scales.
json nvfp4_group() {
  const auto args = [](json dynamic, json observer) {
    return json{{"num_bits", 4},          {"type", "float"},          {"symmetric", true},
                {"strategy", "tensor_group"}, {"dynamic", std::move(dynamic)}, {"group_size", 16},
                {"block_structure", nullptr}, {"actorder", nullptr},     {"observer", std::move(observer)},
                {"observer_kwargs", json::object()}};
  };
  return {{"targets", json::array({"Linear"})},
          {"weights", args(false, "minmax")},
          {"input_activations", args("local", "static_minmax")},
          {"output_activations", nullptr},
          {"format", "nvfp4-pack-quantized"}};
}

// llm-compressor's quantization_config for FP8_DYNAMIC (channel), FP8_BLOCK and static FP8 (tensor), and
// its integer and FP4 schemes (packed_int_group, int8_group, nvfp4_group).
json compressed_tensors_config(const TinyModel& m) {
  const bool block = m.quant == Quant::kCtBlock;
  const char* strategy = m.quant == Quant::kCtTensor ? "tensor" : block ? "block" : "channel";
  json weights = {{"num_bits", 8},         {"type", "float"},         {"symmetric", true},
                  {"strategy", strategy},  {"dynamic", false},        {"group_size", nullptr},
                  {"block_structure", block ? json::array({kFp8Block, kFp8Block}) : json(nullptr)},
                  {"actorder", nullptr},   {"observer", "minmax"},    {"observer_kwargs", json::object()}};
  const bool static_inputs = m.quant == Quant::kCtTensor && m.static_activations;
  json inputs = {{"num_bits", 8},
                 {"type", "float"},
                 {"symmetric", true},
                 {"strategy", static_inputs ? "tensor" : block ? "group" : "token"},
                 {"dynamic", !static_inputs},
                 {"group_size", block ? json(kFp8Block) : json(nullptr)},
                 {"block_structure", nullptr},
                 {"actorder", nullptr},
                 {"observer", static_inputs ? json("minmax") : json(nullptr)},
                 {"observer_kwargs", json::object()}};
  json ignore = json::array();
  for (std::string_view entry : m.family->tiny_quant_ignore) ignore.push_back(std::string(entry));
  for (const json& module : m.family->tiny_quant_ignore.empty() ? unquantized_linears(m) : json::array()) {
    const std::string entry = ignore_entry(module.get<std::string>());
    if (std::find(ignore.begin(), ignore.end(), entry) == ignore.end()) ignore.push_back(entry);
  }
  const bool packed = is_packed_int(m.quant);
  const bool int8 = m.quant == Quant::kCtW8a8;
  const bool nvfp4 = m.quant == Quant::kCtNvfp4;
  json group = packed ? packed_int_group(m)
               : int8 ? int8_group()
               : nvfp4 ? nvfp4_group()
                      : json{{"targets", json::array({"Linear"})},
                             {"weights", std::move(weights)},
                             {"input_activations", std::move(inputs)},
                             {"output_activations", nullptr},
                             {"format", "float-quantized"}};
  return {{"quant_method", "compressed-tensors"},
          {"format", packed ? "pack-quantized" : int8 ? "int-quantized" : nvfp4 ? "nvfp4-pack-quantized" : "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", std::move(group)}}},
          {"ignore", std::move(ignore)},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()},
          {"transform_config", json::object()},
          {"global_compression_ratio", nullptr},
          {"version", "0.12.2"}};
}

// NVIDIA ModelOpt's NVFP4 in config.json's spelling (ModelOpt 0.39+ writes it beside hf_quant_config.json):
// its unquantized linears as exclude wildcards, a layer's module over every layer (model.layers.*.mlp.gate).
json modelopt_config(const TinyModel& m) {
  if (!m.family->tiny_quant_ignore.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "make-tiny writes ModelOpt NVFP4 for families without their own ignore list",
                {.field = "--quant", .expected = "another family", .found = std::string(family_name(m.family))});
  }
  // lm_head always, as ModelOpt's exports list it (with tied embeddings too: vLLM would otherwise give
  // its LM head NVFP4 scales no tensor fills).
  json ignore = json::array({"lm_head"});
  for (const json& module : unquantized_linears(m)) {
    std::string entry = module.get<std::string>();
    const std::string_view layers = "model.layers.";
    if (entry.starts_with(layers)) entry = std::string(layers) + "*" + entry.substr(entry.find('.', layers.size()));
    if (std::find(ignore.begin(), ignore.end(), entry) == ignore.end()) ignore.push_back(entry);
  }
  return {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"group_size", 16},
          {"ignore", std::move(ignore)},
          {"kv_cache_scheme", nullptr},
          {"producer", {{"name", "modelopt"}, {"version", "0.39.0"}}}};
}

// The quantization_config of AutoFP8 / vLLM "fp8" checkpoints, or of DeepSeek-V3's block FP8.
json quantization_config(const TinyModel& m) {
  if (is_compressed_tensors(m.quant)) return compressed_tensors_config(m);
  if (m.quant == Quant::kModeloptNvfp4) return modelopt_config(m);
  if (m.quant == Quant::kAwq) {  // as AutoAWQ writes it (transformers' spelling of the fields)
    return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", kTinyIntGroup}, {"zero_point", true},
            {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  }
  if (is_gptq(m.quant)) {  // as GPTQModel writes it (the layers quantized are those with a qweight)
    const json group = m.quant == Quant::kGptq ? json(kTinyIntGroup) : json(-1);
    return {{"quant_method", "gptq"}, {"bits", 4},         {"group_size", group},         {"desc_act", false},
            {"sym", true},            {"lm_head", false},  {"damp_percent", 0.01},       {"true_sequential", true},
            {"static_groups", false}, {"checkpoint_format", "gptq"}, {"pack_dtype", "int32"}};
  }
  json q;
  if (m.quant == Quant::kFp8Block) {
    q = {{"quant_method", "fp8"},
         {"activation_scheme", "dynamic"},
         {"fmt", "e4m3"},
         {"weight_block_size", json::array({kFp8Block, kFp8Block})}};
  } else {
    q = {{"quant_method", "fp8"}, {"activation_scheme", m.static_activations ? "static" : "dynamic"}};
  }
  if (json modules = unquantized_linears(m); !modules.empty()) {
    q["modules_to_not_convert"] = std::move(modules);
  }
  return q;
}

}  // namespace

json config_json(const TinyModel& m) {
  json c = common(m);
  m.family->tiny_config(m, c);
  // MXFP4 is the family's own field (gpt-oss's tiny_config writes it).
  if (m.quant != Quant::kNone && m.quant != Quant::kMxfp4) c["quantization_config"] = quantization_config(m);
  return c;
}

}  // namespace shardload::tiny
