// Qwen3-Next (Qwen3NextForCausalLM): hybrid layers. Most layers have gated DeltaNet linear attention
// (linear_attn.), every full_attention_interval-th (or as layer_types says) gated softmax attention
// whose q_proj carries an output gate per head (2 x heads x head_dim rows, each head's query rows then
// its gate rows). MoE as Qwen2-MoE: routed experts, one shared expert with a sigmoid gate; the mtp.*
// block (multi-token prediction) is skipped. The per-rank tensors are vLLM's
// (docs/families/qwen3_next.md):
// - in_proj_qkvz and in_proj_ba are stored key-head-group major (per group its q, k, v, z rows; its
//   b, a rows), so a rank's contiguous share of their rows is whole key-head groups, the split vLLM
//   and SGLang make; nk and nv must then divide over the attention ranks.
// - conv1d stacks the channels of all q, then all k, then all v heads: a rank takes its share of each
//   (three row ranges of one tensor), kept [C / T, 1, K] as vLLM allocates it.
// - A_log stays float32 (vLLM and SGLang allocate it so and cast the stored values); dt_bias is in the
//   model dtype; the gated norm is replicated; out_proj is row-parallel.
#include <algorithm>

#include "core/json_input.h"
#include "model/arch/qwen3_next.h"
#include "model/config_fields.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace qwen3_next {

uint64_t key_dim(const ModelConfig& m) { return m.linear_key_heads * m.linear_key_head_dim; }
uint64_t value_dim(const ModelConfig& m) { return m.linear_value_heads * m.linear_value_head_dim; }

namespace {
uint64_t conv_dim(const ModelConfig& m) { return 2 * key_dim(m) + value_dim(m); }
}  // namespace

std::vector<ParamRule> gated_attention_rules() {
  const ShapeFn q = [](const ModelConfig& m) { return Shape{2 * m.heads * m.head_dim, m.hidden}; };
  const ShapeFn kv = [](const ModelConfig& m) { return Shape{m.kv_heads * m.head_dim, m.hidden}; };
  const ShapeFn head = [](const ModelConfig& m) { return Shape{m.head_dim}; };
  return {
      // The gated q rows split like plain q rows: a rank's contiguous share is whole heads, each with
      // its gate, as vLLM's QKVParallelLinear over 2 x heads cuts them.
      {.target = "self_attn.qkv_proj.weight",
       .when = When::kFullAttentionLayer,
       .parts = {{"self_attn.q_proj.weight", Split::kColumn, q},
                 {"self_attn.k_proj.weight", Split::kKvHeads, kv},
                 {"self_attn.v_proj.weight", Split::kKvHeads, kv}},
       .group = Group::kAttention},
      {.target = "self_attn.o_proj.weight",
       .when = When::kFullAttentionLayer,
       .parts = {{"self_attn.o_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.heads * m.head_dim}; }}},
       .group = Group::kAttention},
      {.target = "self_attn.q_norm.weight",
       .when = When::kFullAttentionLayer,
       .parts = {{"self_attn.q_norm.weight", Split::kReplicated, head}},
       .keep = Keep::kFloat32},
      {.target = "self_attn.k_norm.weight",
       .when = When::kFullAttentionLayer,
       .parts = {{"self_attn.k_norm.weight", Split::kReplicated, head}},
       .keep = Keep::kFloat32},
  };
}

std::vector<ParamRule> delta_net_rules() {
  const ShapeFn conv = [](const ModelConfig& m) { return Shape{conv_dim(m), 1, m.linear_conv_kernel}; };
  const ShapeFn heads = [](const ModelConfig& m) { return Shape{m.linear_value_heads}; };
  const std::string conv_name = "linear_attn.conv1d.weight";
  return {
      {.target = conv_name,
       .when = When::kLinearAttentionLayer,
       .parts = {{.source = conv_name, .split = Split::kColumn, .shape = conv,
                  .rows = [](const ModelConfig& m) { return RowRange{0, key_dim(m)}; }},
                 {.source = conv_name, .split = Split::kColumn, .shape = conv,
                  .rows = [](const ModelConfig& m) { return RowRange{key_dim(m), key_dim(m)}; }},
                 {.source = conv_name, .split = Split::kColumn, .shape = conv,
                  .rows = [](const ModelConfig& m) { return RowRange{2 * key_dim(m), value_dim(m)}; }}},
       .group = Group::kAttention},
      {.target = "linear_attn.A_log",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.A_log", Split::kColumn, heads}},
       .group = Group::kAttention,
       .keep = Keep::kFloat32},
      {.target = "linear_attn.dt_bias",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.dt_bias", Split::kColumn, heads}},
       .group = Group::kAttention},
      {.target = "linear_attn.norm.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.norm.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.linear_value_head_dim}; }}}},
      {.target = "linear_attn.out_proj.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.out_proj.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, value_dim(m)}; }}},
       .group = Group::kAttention},
  };
}

std::vector<ParamRule> moe_rules() {
  return concat({expert_rules("mlp.", "gate_proj", "up_proj", "down_proj"),
                 shared_expert_rules("mlp.shared_expert."),
                 {{.target = "mlp.shared_expert_gate.weight",
                   .when = When::kMoeShared,
                   .parts = {{"mlp.shared_expert_gate.weight", Split::kReplicated,
                              [](const ModelConfig& m) { return Shape{1, m.hidden}; }}}}}});
}

// Layers 0 and 2 linear attention, 1 and 3 full; 8 key and 16 value heads (two per group), so that tp 8
// still gives every rank whole key-head groups; one MTP block.
void tiny_hybrid_defaults(TinySizes& m) {
  m.head_dim = 32;
  m.layers = 4;
  m.mtp_layers = 1;
  m.full_attention_interval = 2;
  m.linear_key_heads = 8;
  m.linear_value_heads = 16;
  m.linear_key_head_dim = 16;
  m.linear_value_head_dim = 16;
  m.linear_conv_kernel = 4;
}

bool tiny_linear_layer(const TinySizes& m, int layer) {
  return m.full_attention_interval > 0 && (layer + 1) % m.full_attention_interval != 0;
}

void tiny_hybrid_config(const TinySizes& m, nlohmann::json& c) {
  c["partial_rotary_factor"] = 0.25;
  c["full_attention_interval"] = m.full_attention_interval;
  c["linear_num_key_heads"] = m.linear_key_heads;
  c["linear_num_value_heads"] = m.linear_value_heads;
  c["linear_key_head_dim"] = m.linear_key_head_dim;
  c["linear_value_head_dim"] = m.linear_value_head_dim;
  c["linear_conv_kernel_dim"] = m.linear_conv_kernel;
}

void write_moe(const TinySizes& m, TensorWriter& w, const std::string& p) {
  w.weight(p + "gate.weight", {m.experts, m.hidden});
  write_experts(m, w, p, m.moe_intermediate);
  write_mlp(m, w, p + "shared_expert.", m.shared_intermediate);
  w.weight(p + "shared_expert_gate.weight", {1, m.hidden});
}

std::vector<SkipRule> skips() {
  std::vector<SkipRule> skips = common_skips();
  skips.push_back({"the multi-token-prediction block (mtp.*), which the main model does not load",
                   [](std::string_view name, const ModelConfig&) { return name.starts_with("mtp."); }});
  return skips;
}

namespace {

// Qwen3-Next's input projections, fused on disk by key-head group.
std::vector<ParamRule> fused_projection_rules() {
  return {
      {.target = "linear_attn.in_proj_qkvz.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.in_proj_qkvz.weight", Split::kColumn,
                  [](const ModelConfig& m) { return Shape{2 * key_dim(m) + 2 * value_dim(m), m.hidden}; }}},
       .group = Group::kAttention},
      {.target = "linear_attn.in_proj_ba.weight",
       .when = When::kLinearAttentionLayer,
       .parts = {{"linear_attn.in_proj_ba.weight", Split::kColumn,
                  [](const ModelConfig& m) { return Shape{2 * m.linear_value_heads, m.hidden}; }}},
       .group = Group::kAttention},
  };
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), fused_projection_rules(), delta_net_rules(), gated_attention_rules(),
                       dense_mlp_rules(), moe_rules()}),
      .skips = skips(),
  };
  return table;
}

Error layer_types_error(std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, "not a list of Qwen3-Next layer types",
               {.file = "config.json", .field = "layer_types", .expected = std::move(expected),
                .found = std::move(found)});
}

}  // namespace

void read_hybrid_config(const nlohmann::json& c, ModelConfig& m) {
  // transformers' Qwen3NextConfig defaults.
  m.linear_key_heads = config::get_positive(c, "linear_num_key_heads", 16);
  m.linear_value_heads = config::get_positive(c, "linear_num_value_heads", 32);
  m.linear_key_head_dim = config::get_positive(c, "linear_key_head_dim", 128);
  m.linear_value_head_dim = config::get_positive(c, "linear_value_head_dim", 128);
  m.linear_conv_kernel = config::get_positive(c, "linear_conv_kernel_dim", 4);
  // Each key head's group holds nv / nk value heads (the qkvz rows are grouped so).
  if (m.linear_value_heads % m.linear_key_heads != 0) {
    throw Error(ErrorKind::kConfig, "the linear value heads are not whole groups per key head",
                {.file = "config.json", .field = "linear_num_value_heads",
                 .expected = "a multiple of linear_num_key_heads (" + std::to_string(m.linear_key_heads) + ")",
                 .found = std::to_string(m.linear_value_heads)});
  }
  const nlohmann::json* types = config::field(c, "layer_types");
  if (types == nullptr) {
    const uint64_t interval = config::get_positive(c, "full_attention_interval", 4);
    for (int i = 0; i < m.layers; ++i) m.linear_layer[i] = (static_cast<uint64_t>(i) + 1) % interval != 0;
    return;
  }
  if (!types->is_array() || types->size() != static_cast<size_t>(m.layers)) {
    throw layer_types_error(std::to_string(m.layers) + " entries (num_hidden_layers)",
                            types->is_array() ? std::to_string(types->size()) + " entries" : types->type_name());
  }
  for (int i = 0; i < m.layers; ++i) {
    const nlohmann::json& type = (*types)[static_cast<size_t>(i)];
    if (type == "linear_attention" || type == "full_attention") {
      m.linear_layer[i] = type == "linear_attention";
    } else {
      throw layer_types_error("\"linear_attention\" or \"full_attention\"", brief_json(type));
    }
  }
}

void write_gated_attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  w.projection(p + "q_proj", 2 * m.heads * m.head_dim, m.hidden);
  w.projection(p + "k_proj", m.kv_heads * m.head_dim, m.hidden);
  w.projection(p + "v_proj", m.kv_heads * m.head_dim, m.hidden);
  w.projection(p + "o_proj", m.hidden, m.heads * m.head_dim);
  w.norm(p + "q_norm", m.head_dim);
  w.norm(p + "k_norm", m.head_dim);
}

namespace {

void read_config(const nlohmann::json& c, ModelConfig& m) {
  read_qwen_moe_config(c, m, /*shared_expert=*/true);
  read_hybrid_config(c, m);
}

// make-tiny.

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_qwen_config(c, m, 262144);
  tiny_qwen3_config(c, m);
  tiny_qwen_moe_config(c, m);
  c["shared_expert_intermediate_size"] = m.shared_intermediate;
  c["norm_topk_prob"] = true;
  tiny_hybrid_config(m, c);
  // vLLM's MTP draft reads it (default 1); written so that make-tiny --config writes the block again.
  c["num_nextn_predict_layers"] = m.mtp_layers;
}

void linear_attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  const uint64_t keys = m.linear_key_heads * m.linear_key_head_dim;
  const uint64_t values = m.linear_value_heads * m.linear_value_head_dim;
  w.weight(p + "conv1d.weight", {2 * keys + values, 1, m.linear_conv_kernel});
  w.bias(p + "dt_bias", {m.linear_value_heads});
  w.bias(p + "A_log", {m.linear_value_heads});
  w.projection(p + "in_proj_qkvz", 2 * keys + 2 * values, m.hidden);
  // Never FP8: Qwen's FP8 checkpoints leave it in bf16 (modules_to_not_convert).
  w.weight(p + "in_proj_ba.weight", {2 * m.linear_value_heads, m.hidden});
  w.norm(p + "norm", m.linear_value_head_dim);
  w.projection(p + "out_proj", m.hidden, values);
}

void decoder_layer(const TinySizes& m, TensorWriter& w, const std::string& p, int index, bool linear) {
  w.norm(p + "input_layernorm", m.hidden);
  if (linear) {
    linear_attention(m, w, p + "linear_attn.");
  } else {
    write_gated_attention(m, w, p + "self_attn.");
  }
  w.norm(p + "post_attention_layernorm", m.hidden);
  if (m.experts > 0 && tiny_qwen_moe_layer(m, index)) {
    write_moe(m, w, p + "mlp.");
  } else {
    write_mlp(m, w, p + "mlp.", m.intermediate);
  }
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  for (int i = 0; i < m.layers; ++i) {
    decoder_layer(m, w, "model.layers." + std::to_string(i) + ".", i, tiny_linear_layer(m, i));
  }
  w.norm("model.norm", m.hidden);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, m.hidden});
  // The multi-token-prediction block as the Hub checkpoints carry it: a full-attention MoE layer fed
  // by the normed embedding and hidden state.
  for (int k = 0; k < m.mtp_layers; ++k) {
    w.weight("mtp.fc.weight", {m.hidden, 2 * m.hidden});  // not a *_proj: never FP8 (skipped anyway)
    w.norm("mtp.pre_fc_norm_embedding", m.hidden);
    w.norm("mtp.pre_fc_norm_hidden", m.hidden);
    decoder_layer(m, w, "mtp.layers." + std::to_string(k) + ".", 0, /*linear=*/false);
    w.norm("mtp.norm", m.hidden);
  }
}

}  // namespace
}  // namespace qwen3_next

const Family& qwen3_next_family() {
  using namespace qwen3_next;
  static const Family family{
      .name = "qwen3_next",
      .architectures = {"Qwen3NextForCausalLM"},
      .expert_count_field = "num_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            tiny_hybrid_defaults(m);
            tiny_add_experts(m, 2);
            m.shared_intermediate = 128;
          },
      // A linear and a full layer. A key-head group is 2 x 64 + 2 x 2 x 64 = 384 rows (3 blocks) and a
      // rank's out_proj columns at tp 4 are 128, so every cut falls on a block; no MTP block, to stay small.
      .tiny_block_fp8 =
          [](TinySizes& m) {
            m.layers = 2;
            m.shared_intermediate = 4 * kFp8BlockSize;
            m.mtp_layers = 0;
            m.linear_key_heads = 4;
            m.linear_value_heads = 8;
            m.linear_key_head_dim = 64;
            m.linear_value_head_dim = 64;
          },
      .tiny_moe_layer = tiny_qwen_moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
