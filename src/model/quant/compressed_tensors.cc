// quantization_config of llm-compressor's compressed-tensors checkpoints (docs/layout.md
// "compressed-tensors FP8", "compressed-tensors W4A16 / W8A16" and "compressed-tensors W8A8 int8"): FP8
// weights (float-quantized), integer weights packed into words (pack-quantized), int8 weights as they
// are (int-quantized) or FP4 weights two a byte (nvfp4-pack-quantized), one scheme for the whole model;
// anything else is refused naming the field.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "core/json_input.h"
#include "model/module_match.h"
#include "model/quant/fp8_scales.h"
#include "model/quant/quantization_config.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using json = nlohmann::json;

// `where.field`, or `field` at the top of quantization_config.
std::string path(const std::string& where, const char* field) {
  return where.empty() ? std::string(field) : where + "." + field;
}

// `field` of object `o` as a string; `fallback` when absent or null.
std::string string_field(const json& o, const char* field, const std::string& where, const char* fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw quant_error("not a string", path(where, field), "a string", brief_json(*it));
  return it->get<std::string>();
}

bool bool_field(const json& o, const char* field, const std::string& where, bool fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw quant_error("not a boolean", path(where, field), "true or false", brief_json(*it));
  return it->get<bool>();
}

// num_bits 8 and type "float": FP8 E4M3, the float format shardload loads.
void require_fp8(const json& args, const std::string& where) {
  const auto bits = args.find("num_bits");
  if (bits == args.end() || *bits != 8) {
    throw quant_error("only 8-bit float quantization is loaded", where + ".num_bits", "8",
                   bits == args.end() ? "(missing)" : brief_json(*bits));
  }
  const std::string type = string_field(args, "type", where, "(missing)");
  if (type != "float") {
    throw quant_error("only float (FP8) quantization is loaded; int quantization is not", where + ".type",
                   "float", type);
  }
}

std::vector<std::string> module_list(const json& value, const std::string& field) {
  if (value.is_null()) return {};
  if (!value.is_array()) throw quant_error("not a list of module names", field, "array", value.type_name());
  std::vector<std::string> out;
  for (const json& entry : value) {
    if (!entry.is_string()) throw quant_error("not a module name", field, "strings", brief_json(entry));
    const std::string name = entry.get<std::string>();
    if (const std::string why = module_entry_error(name); !why.empty()) {
      throw quant_error("not a regular expression shardload can match (RE2 syntax: " + why + ")", field,
                     "re:PATTERN without lookaround or backreferences", brief_json(entry));
    }
    out.push_back(name);
  }
  return out;
}

// One config group's schemes, as the model-wide fields they must agree on.
struct Scheme {
  WeightStrategy strategy = WeightStrategy::kTensor;
  uint64_t block_rows = 0, block_cols = 0;
  bool static_activations = false;
  uint32_t bits = 8;  // pack-quantized: 4 or 8
  bool zero_points = false;
  bool operator==(const Scheme&) const = default;
};

// A positive integer field of at most `max`.
uint64_t size_field(const json& o, const char* field, const std::string& where, uint64_t max) {
  const auto it = o.find(field);
  if (it == o.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<uint64_t>() > max) {
    throw quant_error("not a positive integer", path(where, field), fmt::format("1 to {}", max),
                      it == o.end() ? "(missing)" : brief_json(*it));
  }
  return it->get<uint64_t>();
}

// The weights of a pack-quantized group: int, 4 or 8 bits, per group (of a multiple of the words'
// values) or per channel, symmetric or with zero points; activations left in the model dtype (W4A16,
// W8A16). Activation ordering "group" (and "dynamic") stores a g_idx, which vLLM 0.33 refuses and
// shardload too; "weight" and "static" store the weights in their own order and are read as any other.
Scheme read_packed_weights(const json& group, const json& weights, const std::string& w, const std::string& where) {
  Scheme scheme;
  const auto bits = weights.find("num_bits");
  if (bits == weights.end() || (*bits != 4 && *bits != 8)) {
    throw quant_error("pack-quantized weights of 4 or 8 bits are loaded", w + ".num_bits", "4 or 8",
                      bits == weights.end() ? "(missing)" : brief_json(*bits));
  }
  scheme.bits = bits->get<uint32_t>();
  const std::string type = string_field(weights, "type", w, "(missing)");
  if (type != "int") throw quant_error("pack-quantized weights are integers", w + ".type", "int", type);
  if (bool_field(weights, "dynamic", w, false)) {
    throw quant_error("weights quantized at run time are not a checkpoint's weights", w + ".dynamic", "false", "true");
  }
  scheme.zero_points = !bool_field(weights, "symmetric", w, true);
  const std::string strategy = string_field(weights, "strategy", w, "(missing)");
  const uint64_t pack = 32 / scheme.bits;
  if (strategy == "group") {
    scheme.strategy = WeightStrategy::kGroup;
    constexpr uint64_t kMaxGroup = uint64_t{1} << 20;
    scheme.block_rows = 1;
    scheme.block_cols = size_field(weights, "group_size", w, kMaxGroup);
    if (scheme.block_cols % pack != 0) {
      throw quant_error("a group must be whole int32 words of packed values", w + ".group_size",
                        fmt::format("a multiple of {} ({}-bit values a word)", pack, scheme.bits),
                        std::to_string(scheme.block_cols));
    }
  } else if (strategy == "channel") {
    scheme.strategy = WeightStrategy::kChannel;
    scheme.block_rows = 1;
    scheme.block_cols = kWholeRow;
  } else {
    throw quant_error("unsupported strategy for pack-quantized weights", w + ".strategy", "group or channel",
                      strategy);
  }
  const std::string actorder = string_field(weights, "actorder", w, "static");
  if (actorder == "group" || actorder == "dynamic") {
    // vLLM 0.33 refuses these too ("... activation ordering ... is no longer supported"): no engine to
    // hand a g_idx to.
    throw quant_error(fmt::format("activation ordering \"{}\" (a g_idx per input) is not loaded: vLLM 0.33 "
                                  "no longer loads it either; static or weight ordering loads",
                                  actorder),
                      w + ".actorder", "null, static or weight", actorder);
  }
  if (actorder != "static" && actorder != "weight") {
    throw quant_error("unknown activation ordering", w + ".actorder", "null, static, weight or group", actorder);
  }
  for (const char* field : {"input_activations", "output_activations"}) {
    if (const auto it = group.find(field); it != group.end() && !it->is_null()) {
      throw quant_error("pack-quantized weights with quantized activations are not loaded (W4A16 and W8A16 "
                        "keep activations in the model dtype)",
                        where + "." + field, "null", brief_json(*it));
    }
  }
  return scheme;
}

// A field of an int-quantized (W8A8 int8) group: `field` of `o` must be `want` (a missing one
// defaults to `fallback`), else refused with `why`.
void require_field(const json& o, const char* field, const std::string& where, const json& want,
                   const json& fallback, const char* why) {
  const auto it = o.find(field);
  const json& found = it == o.end() || it->is_null() ? fallback : *it;
  if (found != want) throw quant_error(why, path(where, field), want.dump(), brief_json(found));
}

// The weights and activations of an int-quantized group: llm-compressor's W8A8 int8, int8 weights
// with a scale per output row and activations quantized per token at run time -- what vLLM 0.33's
// dense and MoE int8 methods both take. Per-tensor weights (a scale per fused part, folded into rows
// by vLLM's post-processing) and static activation scales are not loaded yet.
Scheme read_int_group(const json& group, const json& weights, const std::string& w, const std::string& where) {
  require_field(weights, "num_bits", w, 8, "(missing)", "int-quantized weights of 8 bits are loaded");
  require_field(weights, "type", w, "int", "(missing)", "int-quantized weights are integers");
  require_field(weights, "dynamic", w, false, false, "weights quantized at run time are not a checkpoint's weights");
  require_field(weights, "symmetric", w, true, true, "int8 weights with zero points are not loaded (vLLM takes "
                                                     "symmetric int8 weights only)");
  require_field(weights, "strategy", w, "channel", "(missing)",
                "int8 weights with a scale per output row (channel) are loaded; per-tensor and group scales "
                "are not yet");
  const std::string a = where + ".input_activations";
  const auto inputs = group.find("input_activations");
  if (inputs == group.end() || !inputs->is_object()) {
    throw quant_error("int-quantized weights without quantized activations (W8A16 unpacked) are not loaded", a,
                      "int8 activations, dynamic per token",
                      inputs == group.end() ? "(missing)" : brief_json(*inputs));
  }
  require_field(*inputs, "num_bits", a, 8, "(missing)", "W8A8 activations are 8-bit");
  require_field(*inputs, "type", a, "int", "(missing)", "W8A8 int8 activations are integers");
  require_field(*inputs, "dynamic", a, true, false,
                "static int8 activation scales (input_scale, input_zero_point) are not loaded yet");
  require_field(*inputs, "strategy", a, "token", "(missing)",
                "int8 activations quantized per token are loaded (vLLM's MoE method takes no other)");
  require_field(*inputs, "symmetric", a, true, true,
                "asymmetric int8 activations are not checked against the engines (vLLM's MoE method takes "
                "symmetric ones only)");
  if (const auto outputs = group.find("output_activations"); outputs != group.end() && !outputs->is_null()) {
    throw quant_error("quantized output activations are not loaded", where + ".output_activations", "null",
                      brief_json(*outputs));
  }
  Scheme scheme;
  scheme.strategy = WeightStrategy::kChannel;
  scheme.block_rows = 1;
  scheme.block_cols = kWholeRow;
  return scheme;
}

// The weights and activations of an nvfp4-pack-quantized group: llm-compressor's NVFP4 (FP4 E2M1
// weights, an FP8 scale per 16 inputs under a float32 global scale per tensor; activations FP4 with
// a static global scale and local scales computed at run time) and NVFP4A16 (activations left alone).
Scheme read_nvfp4_group(const json& group, const json& weights, const std::string& w, const std::string& where) {
  require_field(weights, "num_bits", w, 4, "(missing)", "NVFP4 weights are 4-bit");
  require_field(weights, "type", w, "float", "(missing)", "NVFP4 weights are floats (E2M1)");
  require_field(weights, "strategy", w, "tensor_group", "(missing)",
                "NVFP4 weights are scaled per 16-value group under a global scale (tensor_group)");
  require_field(weights, "group_size", w, 16, "(missing)", "NVFP4 groups hold 16 values");
  require_field(weights, "dynamic", w, false, false, "weights quantized at run time are not a checkpoint's weights");
  require_field(weights, "symmetric", w, true, true, "NVFP4 weights are symmetric");
  Scheme scheme;
  scheme.strategy = WeightStrategy::kGroup;
  scheme.block_rows = 1;
  scheme.block_cols = 16;
  scheme.bits = 4;
  const auto inputs = group.find("input_activations");
  if (inputs != group.end() && !inputs->is_null()) {
    const std::string a = where + ".input_activations";
    if (!inputs->is_object()) throw quant_error("not a JSON object", a, "object", inputs->type_name());
    require_field(*inputs, "num_bits", a, 4, "(missing)", "NVFP4 activations are 4-bit");
    require_field(*inputs, "type", a, "float", "(missing)", "NVFP4 activations are floats (E2M1)");
    require_field(*inputs, "strategy", a, "tensor_group", "(missing)",
                  "NVFP4 activations are scaled per 16-value group under a global scale (tensor_group)");
    require_field(*inputs, "dynamic", a, "local", "(missing)",
                  "NVFP4 activations with local scales at run time and a stored global scale are loaded");
    scheme.static_activations = true;  // input_global_scale, one per projection
  }
  if (const auto outputs = group.find("output_activations"); outputs != group.end() && !outputs->is_null()) {
    throw quant_error("quantized output activations are not loaded", where + ".output_activations", "null",
                      brief_json(*outputs));
  }
  return scheme;
}

Scheme read_group(const json& group, const std::string& where, bool packed, bool integer, bool nvfp4) {
  if (!group.is_object()) throw quant_error("not a JSON object", where, "object", group.type_name());
  Scheme scheme;
  const auto weights = group.find("weights");
  if (weights == group.end() || !weights->is_object()) {
    throw quant_error("a config group without weights", where + ".weights", "object",
                   weights == group.end() ? "(missing)" : brief_json(*weights));
  }
  const std::string w = where + ".weights";
  if (packed) return read_packed_weights(group, *weights, w, where);
  if (integer) return read_int_group(group, *weights, w, where);
  if (nvfp4) return read_nvfp4_group(group, *weights, w, where);
  require_fp8(*weights, w);
  if (bool_field(*weights, "dynamic", w, false)) {
    throw quant_error("weights quantized at run time are not a checkpoint's weights", w + ".dynamic", "false", "true");
  }
  if (!bool_field(*weights, "symmetric", w, true)) {
    throw quant_error("asymmetric FP8 weights are not loaded", w + ".symmetric", "true", "false");
  }
  const std::string strategy = string_field(*weights, "strategy", w, "tensor");
  if (strategy == "tensor") {
    scheme.strategy = WeightStrategy::kTensor;
  } else if (strategy == "channel") {
    scheme.strategy = WeightStrategy::kChannel;
    scheme.block_rows = 1;
    scheme.block_cols = kWholeRow;
  } else if (strategy == "block") {
    scheme.strategy = WeightStrategy::kBlock;
    const auto block = weights->find("block_structure");
    std::tie(scheme.block_rows, scheme.block_cols) =
        read_block_size(block == weights->end() ? nullptr : &*block, w + ".block_structure");
  } else {
    throw quant_error("unsupported weight strategy", w + ".strategy", "tensor, channel or block", strategy);
  }
  const auto inputs = group.find("input_activations");
  if (inputs != group.end() && !inputs->is_null()) {
    const std::string a = where + ".input_activations";
    if (!inputs->is_object()) throw quant_error("not a JSON object", a, "object", inputs->type_name());
    require_fp8(*inputs, a);
    scheme.static_activations = !bool_field(*inputs, "dynamic", a, false);
    if (scheme.static_activations) {
      const std::string input_strategy = string_field(*inputs, "strategy", a, "tensor");
      if (input_strategy != "tensor") {
        throw quant_error("static activation scales are loaded per tensor only", a + ".strategy", "tensor",
                       input_strategy);
      }
      if (scheme.strategy != WeightStrategy::kTensor) {
        throw quant_error("static activations with channel or block weights are not loaded (vLLM refuses them "
                       "for MoE)", a + ".dynamic", "true with " + strategy + " weights", "false");
      }
    }
  }
  if (const auto outputs = group.find("output_activations"); outputs != group.end() && !outputs->is_null()) {
    throw quant_error("quantized output activations are not loaded", where + ".output_activations", "null",
                   brief_json(*outputs));
  }
  return scheme;
}

}  // namespace

void read_compressed_tensors(const json& q, ModelConfig& m) {
  const std::string format = string_field(q, "format", "", "(missing)");
  const bool packed = format == "pack-quantized";
  const bool integer = format == "int-quantized";
  const bool nvfp4 = format == "nvfp4-pack-quantized";
  if (format != "float-quantized" && format != "naive-quantized" && !packed && !integer && !nvfp4) {
    throw quant_error("unsupported compressed-tensors format", "format",
                      "float-quantized, naive-quantized (FP8), pack-quantized (packed integer weights), "
                      "int-quantized (int8 weights) or nvfp4-pack-quantized (FP4 weights)",
                      format);
  }
  for (const char* field : {"kv_cache_scheme", "sparsity_config", "transform_config"}) {
    const auto it = q.find(field);
    if (it != q.end() && !it->is_null() && !(it->is_object() && it->empty())) {
      throw quant_error(fmt::format("{} is not loaded", field), field, "null or {}", brief_json(*it));
    }
  }
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    throw quant_error("no config group", "config_groups", "an object of groups",
                   groups == q.end() ? "(missing)" : brief_json(*groups));
  }
  std::optional<Scheme> model_scheme;
  std::string first_group;
  for (const auto& [name, group] : groups->items()) {
    const std::string where = "config_groups." + name;
    if (const auto own = group.is_object() ? group.find("format") : group.end();
        own != group.end() && !own->is_null() && *own != format) {
      throw quant_error("config groups of another format than the checkpoint's are not loaded", where + ".format",
                        format, brief_json(*own));
    }
    const Scheme scheme = read_group(group, where, packed, integer, nvfp4);
    if (model_scheme && !(scheme == *model_scheme)) {
      throw quant_error("config groups with different schemes are not loaded (one scheme per model)", where,
                     "the scheme of config_groups." + first_group, "another weight strategy or activations");
    }
    if (!model_scheme) first_group = name;
    model_scheme = scheme;
    const auto targets = group.find("targets");
    if (targets == group.end()) throw quant_error("a config group without targets", where + ".targets", "array", "(missing)");
    for (std::string& target : module_list(*targets, where + ".targets")) {
      m.quant_targets.push_back(std::move(target));
    }
  }
  if (const auto ignore = q.find("ignore"); ignore != q.end()) {
    m.quant_ignore = module_list(*ignore, "ignore");
  }
  m.quant_format = QuantFormat::kCompressedTensors;
  m.weight_strategy = model_scheme->strategy;
  m.static_activations = model_scheme->static_activations;
  m.block_rows = model_scheme->block_rows;
  m.block_cols = model_scheme->block_cols;
  if (packed) {
    m.quantization = Quantization::kWna16;
    m.weight_bits = model_scheme->bits;
    m.group_size = model_scheme->block_cols;
    m.zero_points = model_scheme->zero_points;
    return;
  }
  if (integer) {
    m.quantization = Quantization::kInt8;
    m.weight_bits = 8;
    return;
  }
  if (nvfp4) {
    m.quantization = Quantization::kNvfp4;
    m.weight_bits = 4;
    m.group_size = 16;
    return;
  }
  m.quantization = m.weight_strategy == WeightStrategy::kTensor ? Quantization::kFp8 : Quantization::kFp8Block;
}

bool ModelConfig::module_quantized(std::string_view module) const {
  if (quant_format == QuantFormat::kModelopt) return modelopt_module_quantized(*this, module);
  if (quant_format != QuantFormat::kCompressedTensors) return true;
  const auto matches = [&](const std::string& entry) { return module_matches(entry, module); };
  return std::any_of(quant_targets.begin(), quant_targets.end(), matches) &&
         std::none_of(quant_ignore.begin(), quant_ignore.end(), matches);
}

}  // namespace shardload

namespace shardload {

// Tensor weights are per-tensor FP8 and channel and block weights block FP8 (channel as 1 x kWholeRow
// blocks); every scale is named weight_scale.
WeightFormat compressed_tensors_weight_format(const ModelConfig& m) {
  if (m.quantization == Quantization::kWna16) return pack_quantized_format(m);
  if (m.quantization == Quantization::kInt8) return int_quantized_format(m);
  if (m.quantization == Quantization::kNvfp4) return nvfp4_format(m);
  if (m.quantization == Quantization::kFp8Block) return block_fp8_format(m, "weight_scale");
  return per_tensor_fp8_format(m);
}

}  // namespace shardload
