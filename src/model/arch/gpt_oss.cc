// gpt-oss (GptOssForCausalLM): every layer GQA attention with q/k/v/o biases and one learned sink logit
// per query head, and MoE with a biased router; the experts are fused 3-D tensors with biases:
// gate_up_proj [E, H, 2I] ([in, out], gate and up columns interleaved: gate j at 2j, up j at 2j + 1) and
// down_proj [E, I, H]. The Hub checkpoints store the experts in MXFP4 (quant_method "mxfp4"):
// *_blocks [E, out, in/32, 16] U8 (two E2M1 codes a byte) and *_scales [E, out, in/32] U8 (E8M0), already
// [out, in]. transformers' own random models are bf16 with the 3-D tensors.
//
// As vLLM loads it (the pre-kernel layout its loader fills):
// - w13 keeps the interleaving: MoE-TP rank m takes intermediate rows [m*I/Tm, (m+1)*I/Tm), i.e. rows
//   [2m*I/Tm, 2(m+1)*I/Tm) of the 2I, each gate/up pair together; w2 the same intermediate columns.
// - MXFP4 stays MXFP4 (the MoE kernels read it): codes and scales are cut on whole 32-value groups, so
//   I/Tm must be a multiple of 32 (a cut inside a group is an error naming the tensor and the layer).
// - w13's bias is split with its rows; w2's bias is whole on each EP rank's first MoE-TP rank and zero on
//   the others, as the engines keep it: it is added once after the sum over the MoE-TP ranks.
// - sinks are split with the query heads.
// Rank tensors keep the checkpoint's attention and embedding names (SGLang's; vLLM renames self_attn to
// attn and embed_tokens to embedding, a naming for issue 31's engine targets).
#include "model/arch/family.h"
#include "model/config_fields.h"
#include "model/quant/mxfp4.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace {

// The experts' MXFP4 (src/model/quant/mxfp4.cc): groups of `values`, the bytes of codes of one group,
// and what a cut inside a group misses.
uint64_t groups(uint64_t values) { return values / mxfp4_format().group; }
uint64_t group_bytes() { return mxfp4_format().group_bytes(); }
std::string_view groups_name() { return mxfp4_format().groups_name; }

std::vector<ParamRule> moe_rules() {
  const std::string e = "mlp.experts.";
  const ShapeFn up_bias = [](const ModelConfig& m) { return Shape{m.experts, 2 * m.moe_intermediate}; };
  const ShapeFn down_bias = [](const ModelConfig& m) { return Shape{m.experts, m.hidden}; };
  return {
      {.target = "mlp.router.weight",
       .when = When::kMoeLayer,
       .parts = {{"mlp.router.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.experts, m.hidden}; }}}},
      {.target = "mlp.router.bias",
       .when = When::kMoeLayer,
       .parts = {{"mlp.router.bias", Split::kReplicated, [](const ModelConfig& m) { return Shape{m.experts}; }}}},
      // bf16 (transformers): [in, out], transposed into the rank's [out, in].
      {.target = e + "w13_weight",
       .when = When::kLinearExperts,
       .parts = {{.source = e + "gate_up_proj", .split = Split::kColumn,
                  .shape = [](const ModelConfig& m) { return Shape{m.experts, m.hidden, 2 * m.moe_intermediate}; },
                  .stacked = true, .transposed = true}},
       .group = Group::kExperts},
      {.target = e + "w2_weight",
       .when = When::kLinearExperts,
       .parts = {{.source = e + "down_proj", .split = Split::kRow,
                  .shape = [](const ModelConfig& m) { return Shape{m.experts, m.moe_intermediate, m.hidden}; },
                  .stacked = true, .transposed = true}},
       .group = Group::kExperts},
      // MXFP4 (the Hub): already [out, in], kept as codes and scales.
      {.target = e + "w13_weight",
       .when = When::kStoredExperts,
       .parts = {{.source = e + "gate_up_proj_blocks", .split = Split::kColumn,
                  .shape = [](const ModelConfig& m) {
                    return Shape{m.experts, 2 * m.moe_intermediate, groups(m.hidden), group_bytes()};
                  },
                  .stacked = true, .cut_granule = 2 * mxfp4_format().group, .cut_granule_name = groups_name()}},
       .group = Group::kExperts,
       .keep = Keep::kCheckpoint},
      {.target = e + "w13_weight_scale",
       .when = When::kStoredExperts,
       .parts = {{.source = e + "gate_up_proj_scales", .split = Split::kColumn,
                  .shape = [](const ModelConfig& m) {
                    return Shape{m.experts, 2 * m.moe_intermediate, groups(m.hidden)};
                  },
                  .stacked = true, .cut_granule = 2 * mxfp4_format().group, .cut_granule_name = groups_name()}},
       .group = Group::kExperts,
       .keep = Keep::kCheckpoint},
      {.target = e + "w2_weight",
       .when = When::kStoredExperts,
       .parts = {{.source = e + "down_proj_blocks", .split = Split::kRow,
                  .shape = [](const ModelConfig& m) {
                    return Shape{m.experts, m.hidden, groups(m.moe_intermediate), group_bytes()};
                  },
                  .stacked = true, .cut_granule = group_bytes(), .cut_granule_name = groups_name()}},
       .group = Group::kExperts,
       .keep = Keep::kCheckpoint},
      {.target = e + "w2_weight_scale",
       .when = When::kStoredExperts,
       .parts = {{.source = e + "down_proj_scales", .split = Split::kRow,
                  .shape = [](const ModelConfig& m) {
                    return Shape{m.experts, m.hidden, groups(m.moe_intermediate)};
                  },
                  .stacked = true}},
       .group = Group::kExperts,
       .keep = Keep::kCheckpoint},
      // The biases, alike in both formats.
      {.target = e + "w13_bias",
       .when = When::kMoeLayer,
       .parts = {{.source = e + "gate_up_proj_bias", .split = Split::kColumn, .shape = up_bias, .stacked = true}},
       .group = Group::kExperts},
      {.target = e + "w2_bias",
       .when = When::kMoeLayer,
       .parts = {{.source = e + "down_proj_bias", .split = Split::kFirstRank, .shape = down_bias, .stacked = true}},
       .group = Group::kExperts},
  };
}

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false),
                       {{.target = "self_attn.sinks",
                         .parts = {{"self_attn.sinks", Split::kColumn,
                                    [](const ModelConfig& m) { return Shape{m.heads}; }}},
                         .group = Group::kAttention}},
                       moe_rules()}),
      .skips = common_skips(),
  };
  return table;
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.experts = config::get_positive(c, "num_local_experts", std::nullopt, config::kMaxExperts);
  m.moe_intermediate = m.intermediate;  // every expert is intermediate_size wide
  m.moe_layer.assign(m.layers, true);
  m.attention_bias = config::get_bool(c, "attention_bias", true);  // q/k/v and o biases
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 150000.0, 1e-5, 131072);
  c["head_dim"] = m.head_dim;
  c["attention_bias"] = true;
  c["attention_dropout"] = 0.0;
  c["num_local_experts"] = m.experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["experts_per_token"] = m.experts_per_token;
  c["sliding_window"] = 128;
  std::vector<std::string> types;
  for (int i = 0; i < m.layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  c["swiglu_limit"] = 7.0;
  c["router_aux_loss_coef"] = 0.9;
  c["output_router_logits"] = false;
  if (m.mxfp4_experts) {
    c["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                  "lm_head"}}};
  }
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  w.weight("model.embed_tokens.weight", {m.vocab, m.hidden});
  const uint64_t e = m.experts, h = m.hidden, i = m.intermediate;
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.norm(p + "input_layernorm", h);
    write_attention(m, w, p + "self_attn.", /*qkv_bias=*/true, /*qk_norm=*/false);
    w.bias(p + "self_attn.o_proj.bias", {h});
    w.weight(p + "self_attn.sinks", {m.heads});
    w.norm(p + "post_attention_layernorm", h);
    const std::string x = p + "mlp.experts.";
    w.weight(p + "mlp.router.weight", {e, h});
    w.bias(p + "mlp.router.bias", {e});
    if (m.mxfp4_experts) {
      w.mxfp4(x + "gate_up_proj", {e, 2 * i, groups(h), group_bytes()});
      w.mxfp4(x + "down_proj", {e, h, groups(i), group_bytes()});
    } else {
      w.weight(x + "gate_up_proj", {e, h, 2 * i});
      w.weight(x + "down_proj", {e, i, h});
    }
    w.bias(x + "gate_up_proj_bias", {e, 2 * i});
    w.bias(x + "down_proj_bias", {e, h});
  }
  w.norm("model.norm", h);
  if (!m.tie_embeddings) w.weight("lm_head.weight", {m.vocab, h});
}

bool moe_layer(const TinySizes&, int) { return true; }

}  // namespace

const Family& gpt_oss_family() {
  static const Family family{
      .name = "gpt_oss",
      .architectures = {"GptOssForCausalLM"},
      .expert_count_field = "num_local_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults =
          [](TinySizes& m) {
            m.head_dim = 32;
            m.layers = 2;
            tiny_add_experts(m, 2);
            // Every expert is intermediate_size wide: 256 = 8 x 32, so MoE-TP 8 still cuts whole MXFP4
            // groups; the hidden size is a multiple of 32 too.
            m.intermediate = 256;
            m.moe_intermediate = 0;
          },
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
      .no_fp8_checkpoints = "its Hub checkpoints are MXFP4 (--quant mxfp4), not FP8",
      .tiny_mxfp4 = true,
  };
  return family;
}

}  // namespace shardload::arch
