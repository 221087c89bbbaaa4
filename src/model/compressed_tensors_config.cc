// quantization_config of llm-compressor's compressed-tensors checkpoints (docs/layout.md
// "compressed-tensors FP8"): FP8 weights only, one weight strategy and activation scheme for the
// whole model; anything else is refused naming the field.
#include <fmt/format.h>

#include <optional>

#include "core/json_input.h"
#include "model/module_match.h"
#include "model/quantization_config.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxBlockSize = uint64_t{1} << 20;

Error ct_error(std::string message, const std::string& field, std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = "config.json", .field = "quantization_config." + field,
                .expected = std::move(expected), .found = std::move(found)});
}


// `field` of object `o` as a string; `fallback` when absent or null.
std::string string_field(const json& o, const char* field, const std::string& where, const char* fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw ct_error("not a string", where + "." + field, "a string", brief_json(*it));
  return it->get<std::string>();
}

bool bool_field(const json& o, const char* field, const std::string& where, bool fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw ct_error("not a boolean", where + "." + field, "true or false", brief_json(*it));
  return it->get<bool>();
}

// num_bits 8 and type "float": FP8 E4M3, the only format shardload loads.
void require_fp8(const json& args, const std::string& where) {
  const auto bits = args.find("num_bits");
  if (bits == args.end() || *bits != 8) {
    throw ct_error("only 8-bit float quantization is loaded", where + ".num_bits", "8",
                   bits == args.end() ? "(missing)" : brief_json(*bits));
  }
  const std::string type = string_field(args, "type", where, "(missing)");
  if (type != "float") {
    throw ct_error("only float (FP8) quantization is loaded; int quantization is not", where + ".type",
                   "float", type);
  }
}

std::vector<std::string> module_list(const json& value, const std::string& field) {
  if (value.is_null()) return {};
  if (!value.is_array()) throw ct_error("not a list of module names", field, "array", value.type_name());
  std::vector<std::string> out;
  for (const json& entry : value) {
    if (!entry.is_string()) throw ct_error("not a module name", field, "strings", brief_json(entry));
    const std::string name = entry.get<std::string>();
    if (const std::string why = module_entry_error(name); !why.empty()) {
      throw ct_error("not a regular expression shardload can match (RE2 syntax: " + why + ")", field,
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
  bool operator==(const Scheme&) const = default;
};

Scheme read_group(const json& group, const std::string& where) {
  if (!group.is_object()) throw ct_error("not a JSON object", where, "object", group.type_name());
  Scheme scheme;
  const auto weights = group.find("weights");
  if (weights == group.end() || !weights->is_object()) {
    throw ct_error("a config group without weights", where + ".weights", "object",
                   weights == group.end() ? "(missing)" : brief_json(*weights));
  }
  const std::string w = where + ".weights";
  require_fp8(*weights, w);
  if (bool_field(*weights, "dynamic", w, false)) {
    throw ct_error("weights quantized at run time are not a checkpoint's weights", w + ".dynamic", "false", "true");
  }
  if (!bool_field(*weights, "symmetric", w, true)) {
    throw ct_error("asymmetric FP8 weights are not loaded", w + ".symmetric", "true", "false");
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
    const auto size_ok = [](const json& v) {
      return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<uint64_t>() <= kMaxBlockSize;
    };
    if (block == weights->end() || !block->is_array() || block->size() != 2 || !size_ok((*block)[0]) ||
        !size_ok((*block)[1])) {
      throw ct_error("not two positive integers", w + ".block_structure",
                     fmt::format("[rows, cols], each 1-{}", kMaxBlockSize),
                     block == weights->end() ? "(missing)" : brief_json(*block));
    }
    scheme.block_rows = (*block)[0].get<uint64_t>();
    scheme.block_cols = (*block)[1].get<uint64_t>();
  } else {
    throw ct_error("unsupported weight strategy", w + ".strategy", "tensor, channel or block", strategy);
  }
  const auto inputs = group.find("input_activations");
  if (inputs != group.end() && !inputs->is_null()) {
    const std::string a = where + ".input_activations";
    if (!inputs->is_object()) throw ct_error("not a JSON object", a, "object", inputs->type_name());
    require_fp8(*inputs, a);
    scheme.static_activations = !bool_field(*inputs, "dynamic", a, false);
    if (scheme.static_activations) {
      const std::string input_strategy = string_field(*inputs, "strategy", a, "tensor");
      if (input_strategy != "tensor") {
        throw ct_error("static activation scales are loaded per tensor only", a + ".strategy", "tensor",
                       input_strategy);
      }
      if (scheme.strategy != WeightStrategy::kTensor) {
        throw ct_error("static activations with channel or block weights are not loaded (vLLM refuses them "
                       "for MoE)", a + ".dynamic", "true with " + strategy + " weights", "false");
      }
    }
  }
  if (const auto outputs = group.find("output_activations"); outputs != group.end() && !outputs->is_null()) {
    throw ct_error("quantized output activations are not loaded", where + ".output_activations", "null",
                   brief_json(*outputs));
  }
  return scheme;
}

}  // namespace

void read_compressed_tensors(const json& q, ModelConfig& m) {
  const std::string format = string_field(q, "format", "", "(missing)");
  if (format != "float-quantized" && format != "naive-quantized") {
    throw ct_error("only FP8 (float-quantized) compressed-tensors checkpoints are loaded", "format",
                   "float-quantized or naive-quantized", format);
  }
  for (const char* field : {"kv_cache_scheme", "sparsity_config", "transform_config"}) {
    const auto it = q.find(field);
    if (it != q.end() && !it->is_null() && !(it->is_object() && it->empty())) {
      throw ct_error(fmt::format("{} is not loaded", field), field, "null or {}", brief_json(*it));
    }
  }
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    throw ct_error("no config group", "config_groups", "an object of groups",
                   groups == q.end() ? "(missing)" : brief_json(*groups));
  }
  std::optional<Scheme> model_scheme;
  std::string first_group;
  for (const auto& [name, group] : groups->items()) {
    const std::string where = "config_groups." + name;
    const Scheme scheme = read_group(group, where);
    if (model_scheme && !(scheme == *model_scheme)) {
      throw ct_error("config groups with different schemes are not loaded (one scheme per model)", where,
                     "the scheme of config_groups." + first_group, "another weight strategy or activations");
    }
    if (!model_scheme) first_group = name;
    model_scheme = scheme;
    const auto targets = group.find("targets");
    if (targets == group.end()) throw ct_error("a config group without targets", where + ".targets", "array", "(missing)");
    for (std::string& target : module_list(*targets, "quantization_config." + where + ".targets")) {
      m.quant_targets.push_back(std::move(target));
    }
  }
  if (const auto ignore = q.find("ignore"); ignore != q.end()) {
    m.quant_ignore = module_list(*ignore, "quantization_config.ignore");
  }
  m.quant_format = QuantFormat::kCompressedTensors;
  m.weight_strategy = model_scheme->strategy;
  m.static_activations = model_scheme->static_activations;
  m.quantization = m.weight_strategy == WeightStrategy::kTensor ? Quantization::kFp8 : Quantization::kFp8Block;
  m.block_rows = model_scheme->block_rows;
  m.block_cols = model_scheme->block_cols;
}

bool ModelConfig::module_quantized(std::string_view module) const {
  if (quant_format != QuantFormat::kCompressedTensors) return true;
  bool targeted = false;
  for (const std::string& target : quant_targets) targeted = targeted || module_matches(target, module);
  if (!targeted) return false;
  for (const std::string& entry : quant_ignore) {
    if (module_matches(entry, module)) return false;
  }
  return true;
}

}  // namespace shardload
