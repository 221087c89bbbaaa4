// Gemma 4 (gemma4: Gemma4ForCausalLM, whose config is transformers' gemma4_text, and the Hub's
// Gemma4ForConditionalGeneration), dense and MoE, as vLLM 0.33's gemma4.py holds it
// (docs/families/gemma4.md):
// - Layers by layer_types: sliding ones with head_dim x num_key_value_heads, full-attention ones
// with
//   their own head size and KV heads (global_head_dim and num_global_key_value_heads as the Hub's
//   configs write them, per_layer_config as transformers 5 saves them).
// - attention_k_eq_v: the full-attention layers store k_proj alone and K is reused as V, so
// qkv_proj
//   takes k_proj's rows twice. q_norm and k_norm have weights, the v norm none.
// - num_kv_shared_layers: the last layers read an earlier layer's KV cache and hold q_proj alone
//   (vLLM's ColumnParallelLinear, not qkv_proj); the k_proj / v_proj / k_norm that original
//   checkpoints ship for them are skipped, as vLLM drops them. With use_double_wide_mlp their dense
//   MLP is twice intermediate_size.
// - Every layer has a dense MLP (gate_up_proj, down_proj), four norms around attention and MLP and
// a
//   layer_scalar [1]; with the MoE block (enable_moe_block) also a router (proj, its input scale
//   and per_expert_scale, in the model dtype as vLLM builds them), routed experts stored fused 3-D
//   (experts.gate_up_proj [E, 2 Im, H], experts.down_proj [E, H, Im]) and three more norms.
// - Per-layer embeddings (hidden_size_per_layer_input, transformers' default 256): a vocab-parallel
//   table embed_tokens_per_layer, its column-parallel projection, and two replicated projections
//   and a norm in every layer.
// - The multimodal class names the text model model.language_model.* beside the vision and audio
//   towers and their embedders (model.vision_tower.*, model.embed_vision.*, ...: skipped and
//   named).
#include <algorithm>
#include <optional>
#include <string>

#include "model/arch/family.h"
#include "model/config_fields.h"

namespace shardload::arch {
namespace {

using nlohmann::json;

// Which layers a rule takes.
bool sliding(const ModelConfig& m, int l) {
  return l >= 0 && !m.global_layer[static_cast<size_t>(l)];
}
bool global(const ModelConfig& m, int l) {
  return l >= 0 && m.global_layer[static_cast<size_t>(l)];
}
bool kv_shared(const ModelConfig& m, int l) { return l >= m.first_kv_shared_layer; }
bool sliding_own_kv(const ModelConfig& m, int l) { return sliding(m, l) && !kv_shared(m, l); }
bool global_own_kv(const ModelConfig& m, int l) { return global(m, l) && !kv_shared(m, l); }
bool global_own_v(const ModelConfig& m, int l) { return global_own_kv(m, l) && !m.k_eq_v; }
bool global_k_eq_v(const ModelConfig& m, int l) { return global_own_kv(m, l) && m.k_eq_v; }
bool sliding_kv_shared(const ModelConfig& m, int l) { return sliding(m, l) && kv_shared(m, l); }
bool global_kv_shared(const ModelConfig& m, int l) { return global(m, l) && kv_shared(m, l); }
bool double_wide(const ModelConfig& m, int l) { return m.double_wide_mlp && kv_shared(m, l); }
bool single_wide(const ModelConfig& m, int l) { return !double_wide(m, l); }
bool per_layer_inputs(const ModelConfig& m, int) { return m.per_layer_hidden > 0; }

uint64_t global_kv_heads(const ModelConfig& m) { return m.global_kv_heads; }

// The attention of one kind of layer, head size d and kv heads from `Dims`.
struct SlidingDims {
  static uint64_t d(const ModelConfig& m) { return m.head_dim; }
  static uint64_t kv(const ModelConfig& m) { return m.kv_heads; }
  static constexpr uint64_t (*kv_fn)(const ModelConfig&) = nullptr;
};
struct GlobalDims {
  static uint64_t d(const ModelConfig& m) { return m.global_head_dim; }
  static uint64_t kv(const ModelConfig& m) { return m.global_kv_heads; }
  static constexpr uint64_t (*kv_fn)(const ModelConfig&) = global_kv_heads;
};

template <typename Dims>
std::vector<ParamRule> attention(LayerWhen layers, LayerWhen own_v, LayerWhen k_as_v,
                                 LayerWhen shared, LayerWhen own_kv) {
  const ShapeFn q = [](const ModelConfig& m) { return Shape{m.heads * Dims::d(m), m.hidden}; };
  const ShapeFn kv = [](const ModelConfig& m) { return Shape{Dims::kv(m) * Dims::d(m), m.hidden}; };
  const ShapeFn head = [](const ModelConfig& m) { return Shape{Dims::d(m)}; };
  const Part q_part{"self_attn.q_proj.weight", Split::kColumn, q};
  const Part k_part{.source = "self_attn.k_proj.weight",
                    .split = Split::kKvHeads,
                    .shape = kv,
                    .kv_heads = Dims::kv_fn};
  Part v_part = k_part;
  v_part.source = "self_attn.v_proj.weight";
  std::vector<ParamRule> rules = {
      {.target = "self_attn.qkv_proj.weight",
       .parts = {q_part, k_part, v_part},
       .group = Group::kAttention,
       .in_layer = own_v},
      {.target = "self_attn.q_proj.weight",
       .parts = {q_part},
       .group = Group::kAttention,
       .in_layer = shared},
      {.target = "self_attn.o_proj.weight",
       .parts = {{"self_attn.o_proj.weight", Split::kRow,
                  [](const ModelConfig& m) {
                    return Shape{m.hidden, m.heads * Dims::d(m)};
                  }}},
       .group = Group::kAttention,
       .in_layer = layers},
      {.target = "self_attn.q_norm.weight",
       .parts = {{"self_attn.q_norm.weight", Split::kReplicated, head}},
       .keep = Keep::kFloat32,
       .in_layer = layers},
      {.target = "self_attn.k_norm.weight",
       .parts = {{"self_attn.k_norm.weight", Split::kReplicated, head}},
       .keep = Keep::kFloat32,
       .in_layer = own_kv},
  };
  if (k_as_v != nullptr) {  // K reused as V: k_proj's rows fill the v part too
    rules.push_back({.target = "self_attn.qkv_proj.weight",
                     .parts = {q_part, k_part, k_part},
                     .group = Group::kAttention,
                     .in_layer = k_as_v});
  }
  return rules;
}

std::vector<ParamRule> norms(std::initializer_list<const char*> names, When when) {
  std::vector<ParamRule> rules;
  for (const char* name : names) {
    const std::string weight = std::string(name) + ".weight";
    rules.push_back({.target = weight,
                     .when = when,
                     .parts = {{weight, Split::kReplicated,
                                [](const ModelConfig& m) { return Shape{m.hidden}; }}}});
  }
  return rules;
}

// The dense MLP of every layer (a MoE layer's too), intermediate_size or twice it.
template <uint64_t kWidth>
std::vector<ParamRule> mlp(LayerWhen layers) {
  const ShapeFn up = [](const ModelConfig& m) { return Shape{kWidth * m.intermediate, m.hidden}; };
  return {
      {.target = "mlp.gate_up_proj.weight",
       .parts = {{"mlp.gate_proj.weight", Split::kColumn, up},
                 {"mlp.up_proj.weight", Split::kColumn, up}},
       .group = Group::kDenseMlp,
       .in_layer = layers},
      {.target = "mlp.down_proj.weight",
       .parts = {{"mlp.down_proj.weight", Split::kRow,
                  [](const ModelConfig& m) {
                    return Shape{m.hidden, kWidth * m.intermediate};
                  }}},
       .group = Group::kDenseMlp,
       .in_layer = layers},
  };
}

std::vector<ParamRule> moe_rules() {
  const ShapeFn gate_up = [](const ModelConfig& m) {
    return Shape{m.experts, 2 * m.moe_intermediate, m.hidden};
  };
  const ShapeFn experts = [](const ModelConfig& m) { return Shape{m.experts}; };
  const ShapeFn hidden = [](const ModelConfig& m) { return Shape{m.hidden}; };
  std::vector<ParamRule> rules = {
      {.target = "router.proj.weight",
       .when = When::kMoeLayer,
       .parts = {{"router.proj.weight", Split::kReplicated,
                  [](const ModelConfig& m) {
                    return Shape{m.experts, m.hidden};
                  }}}},
      {.target = "router.scale",
       .when = When::kMoeLayer,
       .parts = {{"router.scale", Split::kReplicated, hidden}}},
      {.target = "router.per_expert_scale",
       .when = When::kMoeLayer,
       .parts = {{"router.per_expert_scale", Split::kReplicated, experts}}},
      {.target = "experts.w13_weight",
       .when = When::kMoeLayer,
       .parts = {{.source = "experts.gate_up_proj",
                  .split = Split::kColumn,
                  .shape = gate_up,
                  .stacked = true,
                  .band = Band::kFirstHalf},
                 {.source = "experts.gate_up_proj",
                  .split = Split::kColumn,
                  .shape = gate_up,
                  .stacked = true,
                  .band = Band::kSecondHalf}},
       .group = Group::kExperts},
      {.target = "experts.w2_weight",
       .when = When::kMoeLayer,
       .parts = {{.source = "experts.down_proj",
                  .split = Split::kRow,
                  .shape =
                      [](const ModelConfig& m) {
                        return Shape{m.experts, m.hidden, m.moe_intermediate};
                      },
                  .stacked = true}},
       .group = Group::kExperts},
  };
  for (ParamRule& rule : norms({"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                                "post_feedforward_layernorm_2"},
                               When::kMoeLayer)) {
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::vector<ParamRule> per_layer_input_rules() {
  return {
      {.target = "per_layer_input_gate.weight",
       .parts = {{"per_layer_input_gate.weight", Split::kReplicated,
                  [](const ModelConfig& m) {
                    return Shape{m.per_layer_hidden, m.hidden};
                  }}},
       .in_layer = per_layer_inputs},
      {.target = "per_layer_projection.weight",
       .parts = {{"per_layer_projection.weight", Split::kReplicated,
                  [](const ModelConfig& m) {
                    return Shape{m.hidden, m.per_layer_hidden};
                  }}},
       .in_layer = per_layer_inputs},
      {.target = "post_per_layer_input_norm.weight",
       .parts = {{"post_per_layer_input_norm.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.hidden}; }}},
       .in_layer = per_layer_inputs},
  };
}

std::vector<ParamRule> model_rules() {
  std::vector<ParamRule> rules = embedding_rules();
  const ShapeFn table_rows = [](const ModelConfig& m) {
    return Shape{static_cast<uint64_t>(m.layers) * m.per_layer_hidden, m.hidden};
  };
  // The per-layer embeddings go with the embedding (a vocab-parallel table; its projection split by
  // rows over the same ranks, as vLLM's ColumnParallelLinear gathers it).
  rules.push_back({.target = "model.embed_tokens_per_layer.weight",
                   .parts = {{"model.embed_tokens_per_layer.weight", Split::kVocab,
                              [](const ModelConfig& m) {
                                return Shape{m.per_layer_vocab,
                                             static_cast<uint64_t>(m.layers) * m.per_layer_hidden};
                              }}},
                   .group = Group::kEmbedding,
                   .in_layer = per_layer_inputs});
  rules.push_back(
      {.target = "model.per_layer_model_projection.weight",
       .parts = {{"model.per_layer_model_projection.weight", Split::kColumn, table_rows}},
       .group = Group::kEmbedding,
       .in_layer = per_layer_inputs});
  rules.push_back({.target = "model.per_layer_projection_norm.weight",
                   .parts = {{"model.per_layer_projection_norm.weight", Split::kReplicated,
                              [](const ModelConfig& m) { return Shape{m.per_layer_hidden}; }}},
                   .in_layer = per_layer_inputs});
  return rules;
}

const ArchTable& table() {
  static const ArchTable table{
      .model = model_rules(),
      .layer = concat({
          norms({"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"},
                When::kAlways),
          {{.target = "layer_scalar",
            .parts = {{"layer_scalar", Split::kReplicated,
                       [](const ModelConfig&) { return Shape{1}; }}}}},
          attention<SlidingDims>(sliding, sliding_own_kv, nullptr, sliding_kv_shared,
                                 sliding_own_kv),
          attention<GlobalDims>(global, global_own_v, global_k_eq_v, global_kv_shared,
                                global_own_kv),
          mlp<1>(single_wide),
          mlp<2>(double_wide),
          moe_rules(),
          per_layer_input_rules(),
      }),
      .skips =
          [] {
            std::vector<SkipRule> skips = common_skips();
            skips.push_back(
                {"K/V projections and k_norm of a layer that reads an earlier layer's KV cache "
                 "(num_kv_shared_layers; vLLM drops them)",
                 [](std::string_view name, const ModelConfig& m) {
                   const long layer = layer_index(name);
                   return layer >= m.first_kv_shared_layer && layer < m.layers &&
                          (name.ends_with(".self_attn.k_proj.weight") ||
                           name.ends_with(".self_attn.v_proj.weight") ||
                           name.ends_with(".self_attn.k_norm.weight"));
                 }});
            return skips;
          }(),
  };
  return table;
}

// config.json.

// One layer's head size and KV heads as transformers' Gemma4TextConfig gives them:
// per_layer_config's overrides (as transformers 5 saves the config), else for full-attention layers
// global_head_dim (default 512) and, with attention_k_eq_v, num_global_key_value_heads.
struct LayerGeometry {
  uint64_t head_dim;
  uint64_t kv_heads;
  bool operator==(const LayerGeometry&) const = default;
};

std::vector<LayerGeometry> layer_geometry(const json& c, const ModelConfig& m,
                                          const std::vector<bool>& full) {
  std::vector<LayerGeometry> out(full.size(), LayerGeometry{m.head_dim, m.kv_heads});
  const json* overrides = config::field(c, "per_layer_config");
  if (overrides == nullptr) {
    const uint64_t head_dim = config::get_positive(c, "global_head_dim", 512, uint64_t{1} << 16);
    const uint64_t kv_heads = m.k_eq_v ? config::get_positive(c, "num_global_key_value_heads",
                                                              m.kv_heads, uint64_t{1} << 16)
                                       : m.kv_heads;
    for (size_t i = 0; i < full.size(); ++i) {
      if (full[i]) out[i] = {head_dim, kv_heads};
    }
    return out;
  }
  if (!overrides->is_object()) {
    throw config::config_error(
        "per_layer_config is not an object of layer overrides", "per_layer_config",
        "{\"<layer>\": {\"head_dim\": ..., \"num_key_value_heads\": ...}}", overrides->type_name());
  }
  for (const auto& [key, value] : overrides->items()) {
    size_t layer = 0;
    const bool number =
        !key.empty() && key.size() <= 6 && std::all_of(key.begin(), key.end(), ::isdigit);
    if (number) layer = std::stoul(key);
    if (!number || layer >= full.size() || !value.is_object()) {
      throw config::config_error(
          "per_layer_config names no layer of the model", "per_layer_config." + key,
          "a layer index below num_hidden_layers with an object of overrides", key);
    }
    out[layer] = {
        config::get_positive(value, "head_dim", m.head_dim, uint64_t{1} << 16),
        config::get_positive(value, "num_key_value_heads", m.kv_heads, uint64_t{1} << 16)};
  }
  return out;
}

std::vector<bool> full_attention_layers(const json& c, int layers) {
  std::vector<bool> full(static_cast<size_t>(layers), false);
  const json* types = config::field(c, "layer_types");
  if (types == nullptr) {  // transformers' default: five sliding layers, then a full one
    for (int i = 0; i < layers; ++i) full[static_cast<size_t>(i)] = (i + 1) % 6 == 0;
  } else {
    if (!types->is_array() || types->size() != static_cast<size_t>(layers)) {
      throw config::config_error(
          "layer_types must name every layer", "layer_types", std::to_string(layers) + " entries",
          types->is_array() ? std::to_string(types->size()) : types->type_name());
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& type = (*types)[i];
      if (type == "full_attention") {
        full[i] = true;
      } else if (type != "sliding_attention") {
        throw config::config_error("unknown layer type", "layer_types",
                                   "sliding_attention or full_attention",
                                   type.is_string() ? type.get<std::string>() : type.type_name());
      }
    }
  }
  full.back() = true;  // transformers forces the last layer to full attention
  return full;
}

void read_config(const json& c, ModelConfig& m) {
  m.tie_embeddings = config::get_bool(c, "tie_word_embeddings", true);  // Gemma ties by default
  if (m.attention_bias) {
    throw config::config_error("Gemma 4 with attention biases is not supported", "attention_bias",
                               "false", "true");
  }
  m.k_eq_v = config::get_bool(c, "attention_k_eq_v", false);
  const std::vector<bool> full = full_attention_layers(c, m.layers);
  const std::vector<LayerGeometry> geometry = layer_geometry(c, m, full);
  std::optional<LayerGeometry> global;
  for (size_t i = 0; i < full.size(); ++i) {
    // Sliding layers keep head_dim x num_key_value_heads; the full ones share one geometry, which
    // the table's two kinds of layers need.
    const bool same = full[i] ? (!global || *global == geometry[i])
                              : geometry[i] == LayerGeometry{m.head_dim, m.kv_heads};
    if (!same) {
      throw config::config_error(
          "layers of one attention type with different head sizes or KV heads are not supported",
          "per_layer_config",
          full[i] ? "one geometry for every full-attention layer" : "no sliding-layer override",
          "layer " + std::to_string(i));
    }
    if (full[i]) global = geometry[i];
  }
  m.global_layer = full;
  m.global_head_dim = global->head_dim;
  m.global_kv_heads = global->kv_heads;
  const uint64_t shared = config::get_uint(c, "num_kv_shared_layers", 0);
  if (shared >= static_cast<uint64_t>(m.layers)) {
    throw config::config_error("every layer would read an earlier layer's KV cache",
                               "num_kv_shared_layers", "fewer than num_hidden_layers",
                               std::to_string(shared));
  }
  m.first_kv_shared_layer = m.layers - static_cast<int>(shared);
  m.double_wide_mlp = config::get_bool(c, "use_double_wide_mlp", false);
  m.per_layer_hidden = config::get_uint(c, "hidden_size_per_layer_input", 256);
  if (m.per_layer_hidden > 0)
    m.per_layer_vocab = config::get_positive(c, "vocab_size_per_layer_input", 262144);
  // transformers builds the MoE block from enable_moe_block, vLLM from num_experts being set: a
  // config where they disagree is refused.
  const bool moe = config::get_bool(c, "enable_moe_block", false);
  const json* experts = config::field(c, "num_experts");
  if (moe != (experts != nullptr)) {
    throw config::config_error(
        "enable_moe_block and num_experts disagree (transformers reads the first, vLLM the "
        "second)",
        "enable_moe_block",
        experts != nullptr ? "true with num_experts" : "false without num_experts",
        moe ? "true" : "false");
  }
  if (!moe) return;
  m.experts = config::get_positive(c, "num_experts", {}, config::kMaxExperts);
  m.moe_intermediate = config::field(c, "moe_intermediate_size") != nullptr
                           ? config::get_positive(c, "moe_intermediate_size")
                           : config::get_positive(c, "expert_intermediate_size");
  m.moe_layer.assign(m.moe_layer.size(), true);
}

// make-tiny.

void tiny_defaults(TinySizes& m) {
  m.layers = 6;
  m.tie_embeddings = true;
  m.sliding_pattern = 3;  // layers 2 and 5 full attention
  m.global_head_dim = 32;
  m.global_kv_heads = 1;
  m.k_eq_v = true;
  m.kv_shared_layers = 2;  // layers 4 (sliding) and 5 (full) read earlier layers' caches
  m.double_wide_mlp = true;
  m.per_layer_hidden = 8;
  tiny_add_experts(m, 2);
}

bool tiny_full_layer(const TinySizes& m, int layer) {
  return (layer + 1) % m.sliding_pattern == 0 || layer == m.layers - 1;
}

void tiny_config(const TinySizes& m, json& c) {
  c["model_type"] = "gemma4_text";
  c.erase("hidden_act");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["rms_norm_eps"] = 1e-6;
  c["max_position_embeddings"] = 131072;
  c["head_dim"] = m.head_dim;
  c["global_head_dim"] = m.global_head_dim;
  c["num_global_key_value_heads"] = m.global_kv_heads;
  c["attention_k_eq_v"] = m.k_eq_v;
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["sliding_window"] = 512;
  c["final_logit_softcapping"] = 30.0;
  json types = json::array();
  for (int i = 0; i < m.layers; ++i)
    types.push_back(tiny_full_layer(m, i) ? "full_attention" : "sliding_attention");
  c["layer_types"] = types;
  c["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"full_attention",
       {{"rope_type", "proportional"},
        {"partial_rotary_factor", 0.25},
        {"rope_theta", 1000000.0}}}};
  c["num_kv_shared_layers"] = m.kv_shared_layers;
  c["use_double_wide_mlp"] = m.double_wide_mlp;
  c["hidden_size_per_layer_input"] = m.per_layer_hidden;
  c["vocab_size_per_layer_input"] = m.vocab;
  c["enable_moe_block"] = m.experts > 0;
  c["num_experts"] = m.experts > 0 ? json(m.experts) : json(nullptr);
  c["top_k_experts"] = m.experts > 0 ? json(m.experts_per_token) : json(nullptr);
  c["moe_intermediate_size"] = m.experts > 0 ? json(m.moe_intermediate) : json(nullptr);
  c["pad_token_id"] = kTinyPadTokenId;
}

void tiny_layer(const TinySizes& m, TensorWriter& w, int i) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  const bool full = tiny_full_layer(m, i);
  const uint64_t d = full ? m.global_head_dim : m.head_dim;
  const uint64_t kv = (full ? m.global_kv_heads : m.kv_heads) * d;
  const bool shared = i >= m.layers - m.kv_shared_layers;
  w.norm(p + "input_layernorm", m.hidden);
  w.projection(p + "self_attn.q_proj", m.heads * d, m.hidden);
  w.norm(p + "self_attn.q_norm", d);
  // A layer reading an earlier layer's cache: the K/V tensors original checkpoints still ship
  // (skipped).
  w.projection(p + "self_attn.k_proj", kv, m.hidden);
  if (!(full && m.k_eq_v) || shared) w.projection(p + "self_attn.v_proj", kv, m.hidden);
  w.norm(p + "self_attn.k_norm", d);
  w.projection(p + "self_attn.o_proj", m.hidden, m.heads * d);
  w.norm(p + "post_attention_layernorm", m.hidden);
  w.norm(p + "pre_feedforward_layernorm", m.hidden);
  write_mlp(m, w, p + "mlp.", (shared && m.double_wide_mlp ? 2 : 1) * m.intermediate);
  w.norm(p + "post_feedforward_layernorm", m.hidden);
  if (m.experts > 0) {
    w.weight(p + "router.proj.weight", {m.experts, m.hidden});
    w.weight(p + "router.scale", {m.hidden});
    w.weight(p + "router.per_expert_scale", {m.experts});
    w.weight(p + "experts.gate_up_proj", {m.experts, 2 * m.moe_intermediate, m.hidden});
    w.weight(p + "experts.down_proj", {m.experts, m.hidden, m.moe_intermediate});
    w.norm(p + "pre_feedforward_layernorm_2", m.hidden);
    w.norm(p + "post_feedforward_layernorm_1", m.hidden);
    w.norm(p + "post_feedforward_layernorm_2", m.hidden);
  }
  if (m.per_layer_hidden > 0) {
    w.weight(p + "per_layer_input_gate.weight", {m.per_layer_hidden, m.hidden});
    w.weight(p + "per_layer_projection.weight", {m.hidden, m.per_layer_hidden});
    w.norm(p + "post_per_layer_input_norm", m.hidden);
  }
  w.weight(p + "layer_scalar", {1});
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  if (m.per_layer_hidden > 0) {
    const uint64_t rows = static_cast<uint64_t>(m.layers) * m.per_layer_hidden;
    w.weight("model.embed_tokens_per_layer.weight", {m.vocab, rows});
    w.weight("model.per_layer_model_projection.weight", {rows, m.hidden});
    w.norm("model.per_layer_projection_norm", m.per_layer_hidden);
  }
  for (int i = 0; i < m.layers; ++i) tiny_layer(m, w, i);
  w.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, m.hidden});
}

}  // namespace

const Family& gemma4_family() {
  static const Family family{
      .name = "gemma4",
      .architectures = {"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"},
      .expert_count_field = "num_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults = tiny_defaults,
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = [](const TinySizes& m, int) { return m.experts > 0; },
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
      .multimodal_architecture = "Gemma4ForConditionalGeneration",
      .multimodal_weight_prefix = "model.language_model.",
      .multimodal_replaced_prefix = "model.",
      .no_fp8_checkpoints =
          "its routed experts are fused 3-D tensors, whose FP8 scales the planner does not cut",
      .tiny_dense_variant = true,
  };
  return family;
}

}  // namespace shardload::arch
