#include <algorithm>
#include <string_view>

#include "core/json_input.h"
#include "core/torch_dtype.h"
#include "model/arch/family.h"
#include "model/config_fields.h"
#include "model/quant/quantization_config.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

using json = nlohmann::json;
using config::config_error;
using config::field;
using config::get_bool;
using config::get_positive;
using config::get_uint;

DType parse_torch_dtype(const json& config) {
  const json* value = field(config, "torch_dtype");  // or dtype (kSpellings)
  if (value == nullptr) return DType::kBF16;
  const std::string name = value->is_string() ? value->get<std::string>() : brief_json(*value);
  if (const std::optional<DType> dtype = torch_dtype_from_name(name)) return *dtype;
  throw config_error("unsupported model dtype", "torch_dtype", "bfloat16, float16 or float32",
                     name);
}

const arch::Family* parse_family(const json& config, std::string& architecture) {
  const json* archs = field(config, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !archs->front().is_string()) {
    throw config_error("no architecture", "architectures", "a list of class names");
  }
  architecture = archs->front().get<std::string>();
  if (const arch::Family* family = arch::family_for_architecture(architecture)) return family;
  throw config_error("unsupported architecture", "architectures", "a supported class name",
                     architecture);
}

}  // namespace

std::string_view family_name(const arch::Family* family) {
  return family == nullptr ? "?" : family->name;
}

const std::vector<std::string_view>& expert_count_fields() {
  static const std::vector<std::string_view> fields = [] {
    std::vector<std::string_view> out;
    for (const arch::Family* family : arch::families()) {
      const std::string_view name = family->expert_count_field;
      if (!name.empty() && std::find(out.begin(), out.end(), name) == out.end())
        out.push_back(name);
    }
    return out;
  }();
  return fields;
}

int ModelConfig::moe_layer_count() const {
  return static_cast<int>(std::count(moe_layer.begin(), moe_layer.end(), true));
}

namespace {

// A multimodal config's text model: its text_config, with the fields the outer config holds for the
// whole model (architectures, dtype, quantization, tied embeddings) where text_config lacks them.
json text_model_config(const json& outer) {
  const auto text = outer.find("text_config");
  if (text == outer.end() || !text->is_object()) {
    throw config_error("a multimodal config without its text model", "text_config", "an object",
                       text == outer.end() ? "absent" : text->type_name());
  }
  json c = *text;
  c["architectures"] = outer["architectures"];
  for (const char* key : {"torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"}) {
    const auto v = outer.find(key);
    if (v != outer.end() && !c.contains(key)) c[key] = *v;
  }
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& outer) {
  if (!outer.is_object()) throw config_error("not a JSON object", "", "object", outer.type_name());
  ModelConfig m;
  m.family = parse_family(outer, m.architecture);
  const bool multimodal = !m.family->multimodal_architecture.empty() &&
                          m.architecture == m.family->multimodal_architecture;
  const json nested = multimodal ? text_model_config(outer) : json();
  const json& c = multimodal ? nested : outer;
  if (multimodal) m.weight_prefix = m.family->multimodal_weight_prefix;
  m.dtype = parse_torch_dtype(c);
  m.hidden = get_positive(c, "hidden_size");
  m.vocab = get_positive(c, "vocab_size");
  const uint64_t layers = get_positive(c, "num_hidden_layers");
  m.layers = static_cast<int>(layers);
  m.heads = get_positive(c, "num_attention_heads");
  m.kv_heads = get_positive(c, "num_key_value_heads", m.heads);
  m.head_dim = get_positive(c, "head_dim", m.hidden / m.heads);
  m.intermediate = get_uint(c, "intermediate_size", 0);
  m.tie_embeddings = get_bool(c, "tie_word_embeddings", false);
  m.attention_bias = get_bool(c, "attention_bias", false) || get_bool(c, "use_bias", false);
  m.mlp_bias = get_bool(c, "mlp_bias", false) || get_bool(c, "use_bias", false);
  m.moe_layer.assign(m.layers, false);
  m.linear_layer.assign(m.layers, false);
  m.global_layer.assign(m.layers, false);
  m.first_kv_shared_layer = m.layers;
  m.family->read_config(c, m);
  read_quantization(c, m);
  return m;
}

}  // namespace shardload
