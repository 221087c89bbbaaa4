// NVIDIA ModelOpt's NVFP4 (quant_method "modelopt", quant_algo "NVFP4"; docs/layout.md "ModelOpt
// NVFP4"): the bytes and FP8 group scales of compressed-tensors' NVFP4 under other names (weight uint8
// [N, K / 2], weight_scale F8_E4M3 [N, K / 16]) and per projection a float32 weight_scale_2 and
// input_scale, the reciprocals of compressed-tensors' global scales (ModelOpt stores amax / (6 * 448)).
// The rank tensors are those vLLM 0.33's ModelOptNvFp4LinearMethod and ModelOptNvFp4FusedMoE hold
// before post-processing: bytes and group scales cut on whole bytes and groups, each fused part's scalars
// kept side by side as read ([parts]; experts [E_l, 2] / [E_l]), which vLLM reduces to their maximum
// after loading.
//
// The config comes in two spellings, read as vLLM 0.33's ModelOptQuantConfigBase.from_config reads them:
// config.json's quantization_config {quant_method, quant_algo, group_size, ignore, kv_cache_scheme, ...}
// and hf_quant_config.json's {producer, quantization: {quant_algo, group_size, exclude_modules,
// kv_cache_quant_algo}} (src/checkpoint/hf_quant_config.cc puts the latter under quantization_config).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "core/json_input.h"
#include "model/quant/quantization_config.h"

namespace shardload {
// Named: the module is built as unity translation units, where another format's anonymous helpers
// (gptq.cc's field_of) would collide.
namespace modelopt_config {

using json = nlohmann::json;

const json* field_of(const json& o, const char* field) {
  const auto it = o.find(field);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// Python's fnmatch.fnmatch on a module name (case-sensitive on POSIX): `*` any run, `?` one character.
// `[...]` sets are refused by the reader (no ModelOpt export writes them).
bool wildcard_match(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> exclude_list(const json* value, const std::string& field) {
  if (value == nullptr) return {};
  if (!value->is_array()) throw quant_error("not a list of module wildcards", field, "array", value->type_name());
  std::vector<std::string> out;
  for (const json& entry : *value) {
    if (!entry.is_string() || entry.get<std::string>().empty()) {
      throw quant_error("not a module wildcard", field, "non-empty strings", brief_json(entry));
    }
    if (entry.get<std::string>().find('[') != std::string::npos) {
      throw quant_error("wildcard character sets ([...]) are not matched", field, "names with * and ? only",
                        brief_json(entry));
    }
    out.push_back(entry.get<std::string>());
  }
  return out;
}

// Refuses any field of `o` not in `known`, naming it: a field shardload does not read could change the
// weights' meaning.
void refuse_unknown(const json& o, std::initializer_list<std::string_view> known, const std::string& where) {
  for (const auto& [key, value] : o.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    throw quant_error("a ModelOpt field shardload does not read", where + key, "no such field", brief_json(value));
  }
}

void read_fields(const json& q, ModelConfig& m);

}  // namespace modelopt_config

void read_modelopt(const nlohmann::json& q, ModelConfig& m) {
  if (!q.contains("quantization")) {
    modelopt_config::read_fields(q, m);
    return;
  }
  try {
    modelopt_config::read_fields(q, m);
  } catch (const Error& e) {
    // hf_quant_config.json's fields are named as that file spells them, not under config.json's
    // quantization_config (src/checkpoint/hf_quant_config.cc put them there).
    ErrorDetails details = e.details();
    details.file = "hf_quant_config.json";
    if (details.field.starts_with("quantization_config.")) {
      details.field.erase(0, std::string_view("quantization_config.").size());
    }
    throw Error(e.kind(), e.message(), std::move(details));
  }
}

void modelopt_config::read_fields(const nlohmann::json& q, ModelConfig& m) {
  // hf_quant_config.json's spelling nests the scheme under "quantization" (vLLM: "traditional ModelOpt
  // format"); config.json's keeps it at the top, its exclusions under "ignore".
  const json* nested = field_of(q, "quantization");
  const bool hf_file = nested != nullptr;
  if (hf_file && !nested->is_object()) {
    throw quant_error("not a JSON object", "quantization", "object", nested->type_name());
  }
  const json& s = hf_file ? *nested : q;
  const std::string at = hf_file ? "quantization." : "";
  if (hf_file) {
    refuse_unknown(q, {"quant_method", "producer", "quantization"}, "");
    refuse_unknown(s, {"quant_algo", "group_size", "exclude_modules", "kv_cache_quant_algo", "nvfp4_embed"}, at);
    // vLLM 0.33 refuses an NVFP4 hf_quant_config.json without these (ModelOptNvFp4Config._from_config).
    for (const char* required : {"group_size", "kv_cache_quant_algo", "exclude_modules"}) {
      if (!s.contains(required)) {
        throw quant_error("ModelOpt NVFP4's hf_quant_config.json must give it (vLLM 0.33 refuses it without)",
                          at + required, "present", "(missing)");
      }
    }
  } else {
    // config_groups: ModelOpt 0.39+ writes compressed-tensors-style groups beside quant_algo, which vLLM
    // 0.33 does not read (quant_algo decides): neither does shardload.
    refuse_unknown(q, {"quant_method", "quant_algo", "group_size", "ignore", "exclude_modules", "kv_cache_scheme",
                       "producer", "config_groups", "nvfp4_embed"},
                   "");
    // vLLM 0.33 loads NVFP4 whose groups all leave activations alone as W4A16_NVFP4 (other rank tensors).
    if (const json* groups = field_of(q, "config_groups"); groups != nullptr && groups->is_object()) {
      for (const auto& [name, group] : groups->items()) {
        if (!group.is_object() || field_of(group, "input_activations") == nullptr) {
          throw quant_error("weight-only NVFP4 groups (vLLM's W4A16_NVFP4) are not loaded",
                            "config_groups." + name + ".input_activations", "NVFP4 activations", "null");
        }
      }
    }
  }
  const json* algo = field_of(s, "quant_algo");
  const std::string algo_name = algo == nullptr ? "(missing)" : algo->is_string() ? upper(algo->get<std::string>())
                                                                                   : brief_json(*algo);
  if (algo_name == "MIXED_PRECISION") {
    // Per-layer formats (quantized_layers: FP8 here, NVFP4 there) are one format per module; shardload
    // holds one format per model.
    throw quant_error("ModelOpt's per-layer mixed formats are not loaded (one format per model)", at + "quant_algo",
                      "NVFP4", algo_name);
  }
  if (algo_name != "NVFP4") {
    // FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, W4A16_NVFP4, MXFP8: other rank tensors, not described yet.
    throw quant_error("only ModelOpt's NVFP4 is loaded", at + "quant_algo", "NVFP4", algo_name);
  }
  if (const json* group = field_of(s, "group_size"); group != nullptr && *group != 16) {
    throw quant_error("NVFP4 groups hold 16 values", at + "group_size", "16", brief_json(*group));
  }
  // KV-cache scales (k_scale / v_scale tensors) are not read: refused rather than dropped.
  if (const json* kv = field_of(s, hf_file ? "kv_cache_quant_algo" : "kv_cache_scheme"); kv != nullptr) {
    throw quant_error("a quantized KV cache is not loaded", at + (hf_file ? "kv_cache_quant_algo" : "kv_cache_scheme"),
                      "null", brief_json(*kv));
  }
  if (const json* embed = field_of(s, "nvfp4_embed"); embed != nullptr && *embed != false) {
    throw quant_error("NVFP4 embeddings are not loaded", at + "nvfp4_embed", "false", brief_json(*embed));
  }
  // config.json: "ignore", else "exclude_modules" (vLLM 0.33 reads either, ignore first).
  const char* exclude_field = hf_file || !q.contains("ignore") ? "exclude_modules" : "ignore";
  m.quant_ignore = exclude_list(field_of(s, exclude_field), at + exclude_field);
  m.quant_targets.clear();
  m.quant_format = QuantFormat::kModelopt;
  m.quantization = Quantization::kNvfp4;
  m.static_activations = true;  // NVFP4 (W4A4) stores every layer's input_scale
  m.weight_bits = 4;
  m.group_size = 16;
}

// vLLM 0.33's ModelOptQuantConfigBase.is_layer_excluded: an entry that is a substring of the module's
// name or a wildcard it matches. vLLM matches its own (fused) names: a wildcard naming one part of a
// fused layer only (q_proj of qkv_proj) is refused by the planner as a layer quantized in part.
bool modelopt_module_quantized(const ModelConfig& m, std::string_view module) {
  for (const std::string& entry : m.quant_ignore) {
    if (module.find(entry) != std::string_view::npos || modelopt_config::wildcard_match(entry, module)) return false;
  }
  return true;
}

WeightFormat modelopt_nvfp4_format(const ModelConfig&) {
  WeightFormat format = nvfp4_group_format("modelopt nvfp4 group 16, NVFP4 activations", "weight");
  format.companions.push_back(nvfp4_part_scalar("weight_scale_2", ParamRole::kWeightScale));
  CompanionTensor input = nvfp4_part_scalar("input_scale", ParamRole::kInputScale);
  // Measured (tests/engines): vLLM 0.33's ModelOptNvFp4FusedMoE picks a FlashInfer backend where NVFP4 MoE
  // experts run (NVIDIA GPUs; the harness's CPU stand-in) and then holds w13_input_scale [E, 2] and
  // w2_input_scale [E] for every expert on every rank (use_global_sf), filled by global expert id.
  input.every_expert = true;
  format.companions.push_back(input);
  return format;
}

}  // namespace shardload
