#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "core/json_input.h"
#include "core/torch_dtype.h"
#include "model/quantization_config.h"
#include "shardload/error.h"
#include "shardload/model.h"

namespace shardload {
namespace {

using json = nlohmann::json;

struct ArchitectureName {
  std::string_view name;
  Family family;
};

constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", Family::kLlama},
    {"MistralForCausalLM", Family::kLlama},
    {"Ernie4_5ForCausalLM", Family::kLlama},
    {"Qwen2ForCausalLM", Family::kQwen2},
    {"Qwen3ForCausalLM", Family::kQwen3},
    {"Qwen2MoeForCausalLM", Family::kQwen2Moe},
    {"Qwen3MoeForCausalLM", Family::kQwen3Moe},
    {"MixtralForCausalLM", Family::kMixtral},
    {"DeepseekV2ForCausalLM", Family::kDeepseekV2},
    {"DeepseekV3ForCausalLM", Family::kDeepseekV3},
    {"Ernie4_5_MoeForCausalLM", Family::kErnie45Moe},
};

Error config_error(std::string message, std::string field, std::string expected = {},
                   std::string found = {}) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = "config.json", .field = std::move(field), .expected = std::move(expected),
                .found = std::move(found)});
}

const json* field(const json& config, const char* name) {
  auto it = config.find(name);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

// The largest value a size in config.json may take: far above any real model (DeepSeek-V3: hidden
// 7168, vocab 129280, 256 experts, 61 layers), and low enough that the products the planner forms
// (experts x 2 x intermediate x hidden x 4 bytes at most) stay below 2^64.
struct SizeLimit {
  std::string_view field;
  uint64_t max;
};
constexpr uint64_t kMaxConfigSize = uint64_t{1} << 24;  // any size not listed below
constexpr SizeLimit kSizeLimits[] = {
    {"hidden_size", uint64_t{1} << 20},         {"vocab_size", uint64_t{1} << 26},
    {"num_hidden_layers", 100000},              {"num_attention_heads", uint64_t{1} << 16},
    {"num_key_value_heads", uint64_t{1} << 16}, {"head_dim", uint64_t{1} << 16},
    {"num_experts", uint64_t{1} << 16},         {"num_local_experts", uint64_t{1} << 16},
    {"n_routed_experts", uint64_t{1} << 16},    {"moe_num_experts", uint64_t{1} << 16},
    {"n_shared_experts", 1024},                 {"moe_num_shared_experts", 1024},
    {"n_group", uint64_t{1} << 16},
};

uint64_t size_limit(std::string_view name) {
  for (const SizeLimit& limit : kSizeLimits) {
    if (limit.field == name) return limit.max;
  }
  return kMaxConfigSize;
}

uint64_t get_uint(const json& config, const char* name, std::optional<uint64_t> fallback = {}) {
  const json* value = field(config, name);
  if (value == nullptr) {
    if (fallback) return *fallback;
    throw config_error("required field missing", name, "a non-negative integer");
  }
  if (!value->is_number_integer() || (!value->is_number_unsigned() && value->get<int64_t>() < 0)) {
    throw config_error("not a non-negative integer", name, "a non-negative integer",
                       brief_json(*value));
  }
  const uint64_t max = size_limit(name);
  if (value->get<uint64_t>() > max) {
    throw config_error("size out of range", name, fmt::format("at most {}", max),
                       brief_json(*value));
  }
  return value->get<uint64_t>();
}

uint64_t get_positive(const json& config, const char* name, std::optional<uint64_t> fallback = {}) {
  const uint64_t value = get_uint(config, name, fallback);
  if (value == 0) throw config_error("must be positive", name, "> 0", "0");
  return value;
}

bool get_bool(const json& config, const char* name, bool fallback) {
  const json* value = field(config, name);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) throw config_error("not a boolean", name, "true or false", brief_json(*value));
  return value->get<bool>();
}

DType parse_torch_dtype(const json& config) {
  const json* value = field(config, "torch_dtype");
  if (value == nullptr) value = field(config, "dtype");
  if (value == nullptr) return DType::kBF16;
  const std::string name = value->is_string() ? value->get<std::string>() : brief_json(*value);
  if (const std::optional<DType> dtype = torch_dtype_from_name(name)) return *dtype;
  throw config_error("unsupported model dtype", "torch_dtype", "bfloat16, float16 or float32", name);
}

Family parse_family(const json& config, std::string& architecture) {
  const json* archs = field(config, "architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !archs->front().is_string()) {
    throw config_error("no architecture", "architectures", "a list of class names");
  }
  architecture = archs->front().get<std::string>();
  for (const ArchitectureName& known : kArchitectures) {
    if (known.name == architecture) return known.family;
  }
  throw config_error("unsupported architecture", "architectures", "a supported class name",
                     architecture);
}

bool in_list(const json& config, const char* name, int layer) {
  const json* list = field(config, name);
  if (list == nullptr) return false;
  if (!list->is_array()) throw config_error("not a list", name, "a list of layer indices", brief_json(*list));
  return std::any_of(list->begin(), list->end(),
                     [&](const json& v) { return v.is_number_integer() && v.get<int>() == layer; });
}

void read_moe(const json& c, ModelConfig& m) {
  const int n = m.layers;
  m.moe_layer.assign(n, false);
  switch (m.family) {
    case Family::kLlama:
    case Family::kQwen2:
    case Family::kQwen3:
      return;
    case Family::kQwen2Moe:
    case Family::kQwen3Moe: {
      m.experts = get_uint(c, "num_experts", 0);
      if (m.experts == 0) return;
      m.moe_intermediate = get_positive(c, "moe_intermediate_size");
      if (m.family == Family::kQwen2Moe) m.shared_intermediate = get_uint(c, "shared_expert_intermediate_size", 0);
      const uint64_t step = get_positive(c, "decoder_sparse_step", 1);
      for (int i = 0; i < n; ++i) {
        m.moe_layer[i] = !in_list(c, "mlp_only_layers", i) && (i + 1) % step == 0;
      }
      return;
    }
    case Family::kMixtral:
      m.experts = get_positive(c, "num_local_experts");
      m.moe_intermediate = m.intermediate;
      m.moe_layer.assign(n, true);
      return;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3: {
      m.experts = get_uint(c, "n_routed_experts", 0);
      if (m.experts == 0) return;
      m.moe_intermediate = get_positive(c, "moe_intermediate_size");
      m.shared_intermediate = m.moe_intermediate * get_uint(c, "n_shared_experts", 0);
      const uint64_t first = get_uint(c, "first_k_dense_replace", 0);
      const uint64_t freq = get_positive(c, "moe_layer_freq", 1);
      for (int i = 0; i < n; ++i) m.moe_layer[i] = static_cast<uint64_t>(i) >= first && i % freq == 0;
      m.n_group = get_uint(c, "n_group", 1);
      return;
    }
    case Family::kErnie45Moe: {
      m.experts = get_uint(c, "moe_num_experts", 0);
      if (m.experts == 0 || !get_bool(c, "use_moe", true)) {
        m.experts = 0;
        return;
      }
      m.moe_intermediate = get_positive(c, "moe_intermediate_size");
      m.shared_intermediate = m.moe_intermediate * get_uint(c, "moe_num_shared_experts", 0);
      const uint64_t start = get_uint(c, "moe_layer_start_index", 0);
      const uint64_t end = get_uint(c, "moe_layer_end_index", n - 1);
      const uint64_t interval = get_positive(c, "moe_layer_interval", 1);
      for (int i = 0; i < n; ++i) {
        const uint64_t u = static_cast<uint64_t>(i);
        m.moe_layer[i] = (u + 1) % interval == 0 && start <= u && u <= end;
      }
      return;
    }
  }
}

}  // namespace

std::string_view family_name(Family family) {
  switch (family) {
    case Family::kLlama: return "llama";
    case Family::kQwen2: return "qwen2";
    case Family::kQwen3: return "qwen3";
    case Family::kQwen2Moe: return "qwen2_moe";
    case Family::kQwen3Moe: return "qwen3_moe";
    case Family::kMixtral: return "mixtral";
    case Family::kDeepseekV2: return "deepseek_v2";
    case Family::kDeepseekV3: return "deepseek_v3";
    case Family::kErnie45Moe: return "ernie4_5_moe";
  }
  return "?";
}

int ModelConfig::moe_layer_count() const {
  return static_cast<int>(std::count(moe_layer.begin(), moe_layer.end(), true));
}

ModelConfig ModelConfig::from_json(const json& c) {
  if (!c.is_object()) throw config_error("not a JSON object", "", "object", c.type_name());
  ModelConfig m;
  m.family = parse_family(c, m.architecture);
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
  m.qkv_bias = m.family == Family::kQwen2 || m.family == Family::kQwen2Moe;
  if (m.family == Family::kDeepseekV2 || m.family == Family::kDeepseekV3) {
    m.q_lora_rank = get_uint(c, "q_lora_rank", 0);
    m.kv_lora_rank = get_positive(c, "kv_lora_rank");
    m.qk_nope_head_dim = get_positive(c, "qk_nope_head_dim");
    m.qk_rope_head_dim = get_positive(c, "qk_rope_head_dim");
    m.v_head_dim = get_positive(c, "v_head_dim");
  }
  read_moe(c, m);
  read_quantization(c, m);
  return m;
}

}  // namespace shardload
