// DeepSeek-V4 (deepseek_v4, DeepseekV4ForCausalLM: Flash and Pro; docs/families/deepseek_v4.md), read in
// DeepSeek's own tensor names as the Hub checkpoints and vLLM 0.33's loader take them
// (vllm/models/deepseek_v4/*/model.py, its WeightsMapper), into vLLM 0.33's own parameters:
// - Model: embed.weight -> model.embed_tokens.weight, norm.weight -> model.norm.weight, head.weight ->
//   lm_head.weight (vocabulary-parallel), hc_head_{fn,base,scale} -> model.hc_head_* (float32, whole).
// - Layers (layers.N. -> model.layers.N.): attn_norm, ffn_norm; the hyper-connection mixers
//   hc_{attn,ffn}_{fn,base,scale} (float32, whole on every rank).
// - Attention: wq_a and wkv fused (in that order) into attn.fused_wqa_wkv, replicated (vLLM builds it
//   with disable_tp); q_norm, kv_norm whole; wq_b split by heads (column); wo_a (the grouped output
//   projection's [o_groups x o_lora_rank, heads x head_dim / o_groups]) split on its rows, o_groups / tp
//   groups a rank; wo_b split on its inputs (row); attn_sink [heads] float32, split by head.
// - Layers with a compression ratio (compress_ratios / layer_types): attn.compressor.{wkv,wgate} fused into
//   fused_wkv_wgate (BF16 in vLLM: no quantization), its ape [ratio, coff x head_dim] float32 (coff 2 for
//   the overlapping ratio-4 windows) and norm, all whole; ratio 4 also has the indexer: indexer.wq_b (FP8
//   on the Hub), indexer.weights_proj (BF16), and its own compressor of index_head_dim, all whole.
// - MoE (every layer): ffn.gate.weight whole; the first hash_layers layers route by ffn.gate.tid2eid
//   [vocab, top-k] (int32, kept as stored); the others have the score bias ffn.gate.bias ->
//   ffn.gate.e_score_correction_bias (float32) only with topk_method noaux_tc, as vLLM creates it; the
//   shared expert w1/w3 -> ffn.shared_experts.gate_up_proj, w2 -> down_proj (TP-split); routed experts
//   ffn.experts.E.w1/w3 -> ffn.experts.w13_weight, w2 -> w2_weight.
// - FP8 (quantization_config fp8, 128 x 128 blocks): "X.scale" -> "X.weight_scale_inv"; with expert_dtype
//   fp4 (Flash, Pro) the scales are F8_E8M0 (ue8m0), kept as their bytes (vLLM holds float8_e8m0fnu), and
//   the routed experts are MXFP4: I8 codes [out, in / 2] (two E2M1 values a byte) and F8_E8M0 scales
//   [out, in / 32] -> w13_weight / w13_weight_scale, w2_weight / w2_weight_scale, kept as stored and cut on
//   whole 32-value groups, held as uint8 as vLLM's Mxfp4MoEMethod holds them (the same bytes: its loader
//   views the E8M0 scales as uint8); with expert_dtype fp8 (Flash-Base) they are block-FP8 experts with
//   float32 scales.
// - mtp.* (the multi-token-prediction module) is skipped: vLLM 0.33 loads it into its draft model
//   (DeepSeekV4MTP), not DeepseekV4ForCausalLM, and drops it on CPU.
#include <algorithm>

#include <fmt/format.h>

#include "model/arch/family.h"
#include "model/config_fields.h"
#include "model/quant/mxfp4.h"
#include "shardload/error.h"

namespace shardload::arch {
namespace {

// The routed experts' MXFP4 (src/model/quant/mxfp4.cc): bytes of codes for `values`, scales (groups) for
// them.
uint64_t code_bytes(uint64_t values) { return values / mxfp4_format().values_per_byte; }
uint64_t groups(uint64_t values) { return values / mxfp4_format().group; }

// The hyper-connection mixers' rows: pre and post weights (hc_mult each) and the hc_mult x hc_mult
// residual mixing.
uint64_t mix_rows(const ModelConfig& m) { return (2 + m.hc_mult) * m.hc_mult; }
// The compressor's windows overlap at ratio 4 (two halves of every projection).
uint64_t overlap(uint64_t ratio) { return ratio == 4 ? 2 : 1; }
uint64_t ratio_of(const ModelConfig& m, int layer) {
  return layer < 0 || static_cast<size_t>(layer) >= m.compress_ratio.size()
             ? 0
             : m.compress_ratio[static_cast<size_t>(layer)];
}
bool compressed(const ModelConfig& m, int layer) { return ratio_of(m, layer) > 1; }
bool indexed(const ModelConfig& m, int layer) { return ratio_of(m, layer) == 4; }
bool hash_routed(const ModelConfig& m, int layer) { return layer < m.hash_layers; }
bool score_biased(const ModelConfig& m, int layer) { return m.score_bias && layer >= m.hash_layers; }

ParamRule whole(std::string target, std::string source, ShapeFn shape, Keep keep = Keep::kModelDtype,
                LayerWhen in_layer = nullptr) {
  return {.target = std::move(target),
          .parts = {{std::move(source), Split::kReplicated, shape}},
          .keep = keep,
          .in_layer = in_layer};
}

// A compressor (attn.compressor. or attn.indexer.compressor.) of head size `head` at ratio `ratio`.
// Its shapes depend on the layer's ratio: a ShapeFn sees no layer, so each compressor kind is its own
// set of rules (ratio 4 with the indexer's, or another ratio).
template <bool kIndexer>
std::vector<ParamRule> compressor_rules(LayerWhen in_layer, uint64_t ratio) {
  const std::string p = kIndexer ? "attn.indexer.compressor." : "attn.compressor.";
  std::vector<ParamRule> rules;
  // ape [ratio, coff x head]: the ratio is the layer's, so the rule is instantiated per ratio value.
  ShapeFn ape = nullptr;
  ShapeFn wkv = nullptr;
  if (ratio == 4) {
    ape = [](const ModelConfig& m) { return Shape{4, 2 * (kIndexer ? m.index_head_dim : m.head_dim)}; };
    wkv = [](const ModelConfig& m) { return Shape{2 * (kIndexer ? m.index_head_dim : m.head_dim), m.hidden}; };
  } else {
    ape = [](const ModelConfig& m) { return Shape{128, m.head_dim}; };
    wkv = [](const ModelConfig& m) { return Shape{m.head_dim, m.hidden}; };
  }
  rules.push_back(whole(p + "ape", p + "ape", ape, Keep::kFloat32, in_layer));
  rules.push_back({.target = p + "fused_wkv_wgate.weight",
                   .parts = {{p + "wkv.weight", Split::kReplicated, wkv}, {p + "wgate.weight", Split::kReplicated, wkv}},
                   .in_layer = in_layer});
  rules.push_back(whole(p + "norm.weight", p + "norm.weight",
                        [](const ModelConfig& m) { return Shape{kIndexer ? m.index_head_dim : m.head_dim}; },
                        Keep::kModelDtype, in_layer));
  return rules;
}

bool heavily_compressed(const ModelConfig& m, int layer) { return compressed(m, layer) && !indexed(m, layer); }

std::vector<ParamRule> attention_rules() {
  const ShapeFn hidden = [](const ModelConfig& m) { return Shape{m.hidden}; };
  std::vector<ParamRule> rules = {
      whole("attn_norm.weight", "attn_norm.weight", hidden),
      whole("ffn_norm.weight", "ffn_norm.weight", hidden),
      {.target = "attn.fused_wqa_wkv.weight",
       .parts = {{"attn.wq_a.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.q_lora_rank, m.hidden}; }},
                 {"attn.wkv.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.head_dim, m.hidden}; }}}},
      whole("attn.q_norm.weight", "attn.q_norm.weight", [](const ModelConfig& m) { return Shape{m.q_lora_rank}; }),
      whole("attn.kv_norm.weight", "attn.kv_norm.weight", [](const ModelConfig& m) { return Shape{m.head_dim}; }),
      {.target = "attn.wq_b.weight",
       .parts = {{"attn.wq_b.weight", Split::kColumn,
                  [](const ModelConfig& m) { return Shape{m.heads * m.head_dim, m.q_lora_rank}; }}},
       .group = Group::kAttention},
      {.target = "attn.wo_a.weight",
       .parts = {{"attn.wo_a.weight", Split::kColumn,
                  [](const ModelConfig& m) {
                    return Shape{m.o_groups * m.o_lora_rank, m.heads * m.head_dim / m.o_groups};
                  }}},
       .group = Group::kAttention},
      {.target = "attn.wo_b.weight",
       .parts = {{"attn.wo_b.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.o_groups * m.o_lora_rank}; }}},
       .group = Group::kAttention},
      {.target = "attn.attn_sink",
       .parts = {{"attn.attn_sink", Split::kColumn, [](const ModelConfig& m) { return Shape{m.heads}; }}},
       .group = Group::kAttention,
       .keep = Keep::kFloat32},
  };
  for (const char* kind : {"attn", "ffn"}) {
    const std::string hc = std::string("hc_") + kind + "_";
    rules.push_back(whole(hc + "fn", hc + "fn",
                          [](const ModelConfig& m) { return Shape{mix_rows(m), m.hc_mult * m.hidden}; },
                          Keep::kFloat32));
    rules.push_back(whole(hc + "base", hc + "base", [](const ModelConfig& m) { return Shape{mix_rows(m)}; },
                          Keep::kFloat32));
    rules.push_back(whole(hc + "scale", hc + "scale", [](const ModelConfig&) { return Shape{3}; }, Keep::kFloat32));
  }
  for (auto& r : compressor_rules<false>(indexed, 4)) rules.push_back(std::move(r));
  for (auto& r : compressor_rules<false>(heavily_compressed, 128)) rules.push_back(std::move(r));
  for (auto& r : compressor_rules<true>(indexed, 4)) rules.push_back(std::move(r));
  rules.push_back({.target = "attn.indexer.wq_b.weight",
                   .parts = {{"attn.indexer.wq_b.weight", Split::kReplicated,
                              [](const ModelConfig& m) { return Shape{m.index_heads * m.index_head_dim, m.q_lora_rank}; }}},
                   .in_layer = indexed});
  rules.push_back(whole("attn.indexer.weights_proj.weight", "attn.indexer.weights_proj.weight",
                        [](const ModelConfig& m) { return Shape{m.index_heads, m.hidden}; }, Keep::kModelDtype,
                        indexed));
  return rules;
}

std::vector<ParamRule> moe_rules() {
  const ShapeFn up = [](const ModelConfig& m) { return Shape{m.moe_intermediate, m.hidden}; };
  const ShapeFn down = [](const ModelConfig& m) { return Shape{m.hidden, m.moe_intermediate}; };
  const std::string x = "ffn.experts.{E}.";
  std::vector<ParamRule> rules = {
      {.target = "ffn.gate.weight",
       .when = When::kMoeLayer,
       .parts = {{"ffn.gate.weight", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.experts, m.hidden}; }}}},
      {.target = "ffn.gate.tid2eid",
       .when = When::kMoeLayer,
       .parts = {{"ffn.gate.tid2eid", Split::kReplicated,
                  [](const ModelConfig& m) { return Shape{m.vocab, m.hash_topk}; }}},
       .keep = Keep::kCheckpoint,
       .in_layer = hash_routed,
       .stored = DType::kI32},
      {.target = "ffn.gate.e_score_correction_bias",
       .when = When::kMoeLayer,
       .parts = {{"ffn.gate.bias", Split::kReplicated, [](const ModelConfig& m) { return Shape{m.experts}; }}},
       .keep = Keep::kFloat32,
       .in_layer = score_biased},
      {.target = "ffn.shared_experts.gate_up_proj.weight",
       .when = When::kMoeShared,
       .parts = {{"ffn.shared_experts.w1.weight", Split::kColumn,
                  [](const ModelConfig& m) { return Shape{m.shared_intermediate, m.hidden}; }},
                 {"ffn.shared_experts.w3.weight", Split::kColumn,
                  [](const ModelConfig& m) { return Shape{m.shared_intermediate, m.hidden}; }}},
       .group = Group::kSharedExperts},
      {.target = "ffn.shared_experts.down_proj.weight",
       .when = When::kMoeShared,
       .parts = {{"ffn.shared_experts.w2.weight", Split::kRow,
                  [](const ModelConfig& m) { return Shape{m.hidden, m.shared_intermediate}; }}},
       .group = Group::kSharedExperts},
      // bf16 (or block-FP8 with expert_dtype fp8): the planner's linear experts.
      {.target = "ffn.experts.w13_weight",
       .when = When::kLinearExperts,
       .parts = {{x + "w1.weight", Split::kColumn, up}, {x + "w3.weight", Split::kColumn, up}},
       .group = Group::kExperts},
      {.target = "ffn.experts.w2_weight",
       .when = When::kLinearExperts,
       .parts = {{x + "w2.weight", Split::kRow, down}},
       .group = Group::kExperts},
  };
  // MXFP4 (expert_dtype fp4): codes and E8M0 scales kept as stored, cut on whole 32-value groups.
  const auto mx = [&](std::string target, std::string w1, std::string w3, Split split, ShapeFn shape, DType dtype,
                      uint64_t granule) {
    ParamRule rule{.target = std::move(target), .when = When::kStoredExperts, .parts = {}, .group = Group::kExperts,
                   .keep = Keep::kCheckpoint, .stored = dtype, .rank_as = DType::kU8};
    for (std::string* source : {&w1, &w3}) {
      if (source->empty()) continue;
      rule.parts.push_back({.source = x + *source, .split = split, .shape = shape, .cut_granule = granule,
                            .cut_granule_name = mxfp4_format().groups_name});
    }
    return rule;
  };
  const DType scales = mxfp4_format().scale_dtype;
  rules.push_back(mx("ffn.experts.w13_weight", "w1.weight", "w3.weight", Split::kColumn,
                     [](const ModelConfig& m) { return Shape{m.moe_intermediate, code_bytes(m.hidden)}; },
                     DType::kI8, 1));
  rules.push_back(mx("ffn.experts.w13_weight_scale", "w1.scale", "w3.scale", Split::kColumn,
                     [](const ModelConfig& m) { return Shape{m.moe_intermediate, groups(m.hidden)}; }, scales, 1));
  rules.push_back(mx("ffn.experts.w2_weight", "w2.weight", "", Split::kRow,
                     [](const ModelConfig& m) { return Shape{m.hidden, code_bytes(m.moe_intermediate)}; },
                     DType::kI8, mxfp4_format().group_bytes()));
  rules.push_back(mx("ffn.experts.w2_weight_scale", "w2.scale", "", Split::kRow,
                     [](const ModelConfig& m) { return Shape{m.hidden, groups(m.moe_intermediate)}; }, scales, 1));
  return rules;
}

const ArchTable& table() {
  static const ArchTable table{
      .model =
          {
              {.target = "model.embed_tokens.weight",
               .parts = {{"embed.weight", Split::kVocab,
                          [](const ModelConfig& m) { return Shape{m.vocab, m.hidden}; }}},
               .group = Group::kEmbedding},
              whole("model.norm.weight", "norm.weight", [](const ModelConfig& m) { return Shape{m.hidden}; }),
              {.target = "lm_head.weight",
               .when = When::kUntiedHead,
               .parts = {{"head.weight", Split::kVocab,
                          [](const ModelConfig& m) { return Shape{m.vocab, m.hidden}; }}},
               .group = Group::kLmHead},
              whole("model.hc_head_fn", "hc_head_fn",
                    [](const ModelConfig& m) { return Shape{m.hc_mult, m.hc_mult * m.hidden}; }, Keep::kFloat32),
              whole("model.hc_head_base", "hc_head_base", [](const ModelConfig& m) { return Shape{m.hc_mult}; },
                    Keep::kFloat32),
              whole("model.hc_head_scale", "hc_head_scale", [](const ModelConfig&) { return Shape{1}; },
                    Keep::kFloat32),
          },
      .layer = concat({attention_rules(), moe_rules()}),
      .skips = {{"the multi-token-prediction module (mtp.*): vLLM 0.33 loads it into its draft model "
                 "(DeepSeekV4MTP), not DeepseekV4ForCausalLM",
                 [](std::string_view name, const ModelConfig&) { return name.starts_with("mtp."); }}},
  };
  return table;
}

// transformers' DeepseekV4Config: layer_types (explicit), else the legacy compress_ratios (0, 4, 128 a
// layer; the Hub's list has one more entry, for the MTP layer), else two heavily compressed layers and
// then compressed-sparse and heavily compressed ones alternating; compress_rates gives each type's
// ratio (sliding_attention: none).
void read_compression(const nlohmann::json& c, ModelConfig& m) {
  uint64_t csa = 4, hca = 128;
  if (const auto* rates = config::field(c, "compress_rates"); rates != nullptr && rates->is_object()) {
    csa = config::get_positive(*rates, "compressed_sparse_attention", csa);
    hca = config::get_positive(*rates, "heavily_compressed_attention", hca);
  }
  csa = config::get_positive(c, "compress_rate_csa", csa);
  hca = config::get_positive(c, "compress_rate_hca", hca);
  m.compress_ratio.assign(static_cast<size_t>(m.layers), 0);
  const auto* types = config::field(c, "layer_types");
  const auto* legacy = config::field(c, "compress_ratios");
  for (int i = 0; i < m.layers; ++i) {
    std::string type;
    if (types != nullptr) {
      if (!types->is_array() || types->size() < static_cast<size_t>(m.layers) || !(*types)[i].is_string()) {
        throw config::config_error("not a layer type a layer", "layer_types",
                                   "num_hidden_layers attention types", "another value");
      }
      type = (*types)[i].get<std::string>();
    } else if (legacy != nullptr) {
      if (!legacy->is_array() || legacy->size() < static_cast<size_t>(m.layers) ||
          !(*legacy)[i].is_number_integer() || (*legacy)[i].get<int64_t>() < 0) {
        throw config::config_error("not a compression ratio a layer", "compress_ratios",
                                   "num_hidden_layers of 0, 4 or 128", "another value");
      }
      const uint64_t r = static_cast<uint64_t>((*legacy)[i].get<int64_t>());
      if (r != 0 && r != 4 && r != 128) {
        throw config::config_error("a compression ratio DeepSeek-V4 does not have", "compress_ratios",
                                   "0, 4 or 128", std::to_string(r));
      }
      type = r == 0 ? "sliding_attention" : r == 4 ? "compressed_sparse_attention" : "heavily_compressed_attention";
    } else {
      type = i < 2 || i % 2 == 0 ? "heavily_compressed_attention" : "compressed_sparse_attention";
    }
    if (type == "sliding_attention") continue;
    if (type == "compressed_sparse_attention") {
      m.compress_ratio[static_cast<size_t>(i)] = csa;
    } else if (type == "heavily_compressed_attention") {
      m.compress_ratio[static_cast<size_t>(i)] = hca;
    } else {
      throw config::config_error("an attention type DeepSeek-V4 does not have", "layer_types",
                                 "sliding_attention, compressed_sparse_attention or heavily_compressed_attention",
                                 type);
    }
  }
  for (const uint64_t r : m.compress_ratio) {
    // The compressor's shapes (ape [ratio, ...]) are known for ratio 4 (overlapping, with the indexer)
    // and 128 only.
    if (r != 0 && r != 4 && r != 128) {
      throw config::config_error("a compression ratio other than DeepSeek-V4's 4 and 128 is not supported",
                                 "compress_rates", "4 and 128", std::to_string(r));
    }
  }
}

void read_config(const nlohmann::json& c, ModelConfig& m) {
  m.q_lora_rank = config::get_positive(c, "q_lora_rank");
  m.o_groups = config::get_positive(c, "o_groups");
  m.o_lora_rank = config::get_positive(c, "o_lora_rank");
  m.hc_mult = config::get_positive(c, "hc_mult", 4);
  m.index_heads = config::get_positive(c, "index_n_heads");
  m.index_head_dim = config::get_positive(c, "index_head_dim");
  if (m.heads % m.o_groups != 0) {
    throw config::config_error("the attention heads must fall into whole output groups", "o_groups",
                               fmt::format("a divisor of num_attention_heads ({})", m.heads),
                               std::to_string(m.o_groups));
  }
  m.experts = config::get_positive(c, "n_routed_experts", std::nullopt, config::kMaxExperts);
  m.moe_intermediate = config::get_positive(c, "moe_intermediate_size");
  m.shared_intermediate = m.moe_intermediate * config::get_uint(c, "n_shared_experts", 0, config::kMaxSharedExperts);
  m.hash_topk = config::get_positive(c, "num_experts_per_tok");
  m.moe_layer.assign(static_cast<size_t>(m.layers), true);  // every layer is MoE
  // transformers: mlp_layer_types (hash_moe, then moe), else the legacy num_hash_layers, else 3.
  if (const auto* types = config::field(c, "mlp_layer_types"); types != nullptr && types->is_array()) {
    m.hash_layers = static_cast<int>(std::count(types->begin(), types->end(), "hash_moe"));
  } else {
    m.hash_layers = static_cast<int>(config::get_uint(c, "num_hash_layers", 3));
  }
  m.hash_layers = std::min(m.hash_layers, m.layers);
  const auto* topk = config::field(c, "topk_method");
  m.score_bias = topk != nullptr && topk->is_string() && *topk == "noaux_tc";
  read_compression(c, m);
  const auto* expert_dtype = config::field(c, "expert_dtype");
  const std::string experts = expert_dtype != nullptr && expert_dtype->is_string() ? expert_dtype->get<std::string>() : "fp4";
  if (experts != "fp4" && experts != "fp8") {
    throw config::config_error("an expert dtype vLLM 0.33's DeepSeek-V4 does not load", "expert_dtype", "fp4 or fp8",
                               experts);
  }
  // Block FP8 linears with "X.scale" grids: ue8m0 (F8_E8M0) beside MXFP4 experts, float32 beside FP8 ones
  // (vLLM's DeepseekV4FP8Config.is_scale_e8m0).
  const bool quantized = config::field(c, "quantization_config") != nullptr;
  m.expert_format = quantized && experts == "fp4" ? &mxfp4_format() : nullptr;
  m.block_scale_suffix = "scale";
  if (m.expert_format != nullptr) m.block_scale_dtype = DType::kF8E8M0;
}

// make-tiny: 8 heads of vLLM's real head size (512; its compressor takes no other), o_groups 8 of 64, two
// layers: a hash-routed heavily compressed one (ratio 128) and a compressed-sparse one (ratio 4, with the
// indexer) with the score bias (the real config's sliding layers are planned in tests/tiny); experts of
// 128 (four MXFP4 groups: MoE-TP up to 4) and two shared ones, so that tp 2 shares of the shared expert are
// whole FP8 blocks. About 7 MiB.
void tiny_defaults(TinySizes& m) {
  m.kv_heads = 1;
  m.head_dim = 512;
  m.qk_rope_head_dim = 64;
  m.layers = 2;
  tiny_add_experts(m, 2);
  m.moe_intermediate = 128;
  m.shared_experts = 2;
  m.shared_intermediate = 0;
  m.intermediate = 0;
  m.q_lora_rank = 128;
  m.o_groups = 8;
  m.o_lora_rank = 64;
  m.hc_mult = 4;
  m.index_heads = 2;
  m.index_head_dim = 128;
  m.compress_ratio = {128, 4};
  m.hash_layers = 1;
  m.score_bias = true;
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  c.erase("intermediate_size");  // transformers maps it onto moe_intermediate_size
  tiny_rope(c, 10000.0, 1e-6, 65536);
  c["head_dim"] = m.head_dim;
  c["q_lora_rank"] = m.q_lora_rank;
  c["qk_rope_head_dim"] = m.qk_rope_head_dim;
  c["o_groups"] = m.o_groups;
  c["o_lora_rank"] = m.o_lora_rank;
  c["hc_mult"] = m.hc_mult;
  c["hc_sinkhorn_iters"] = 20;
  c["hc_eps"] = 1e-6;
  c["index_n_heads"] = m.index_heads;
  c["index_head_dim"] = m.index_head_dim;
  c["index_topk"] = 16;
  c["sliding_window"] = 16;
  c["n_routed_experts"] = m.experts;
  c["n_shared_experts"] = m.shared_experts;
  c["num_experts_per_tok"] = m.experts_per_token;
  c["moe_intermediate_size"] = m.moe_intermediate;
  c["norm_topk_prob"] = true;
  c["routed_scaling_factor"] = 1.5;
  c["scoring_func"] = "sqrtsoftplus";
  c["swiglu_limit"] = 10.0;
  if (m.score_bias) c["topk_method"] = "noaux_tc";
  c["num_hash_layers"] = m.hash_layers;
  c["compress_ratios"] = m.compress_ratio;
  c["compress_rope_theta"] = 160000.0;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32}, {"beta_slow", 1}};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["num_nextn_predict_layers"] = 0;
  if (m.mxfp4_experts) {
    c["expert_dtype"] = "fp4";
    c["quantization_config"] = {{"quant_method", "fp8"},
                                {"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
  }
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// A linear projection: bf16, or (the native checkpoint, make-tiny --quant mxfp4) FP8 with its ue8m0 grid.
void projection(const TinySizes& m, TensorWriter& w, const std::string& module, uint64_t out, uint64_t in) {
  if (!m.mxfp4_experts) return w.projection(module, out, in);
  w.weight(module + ".weight", {out, in}, DType::kF8E4M3);
  w.stored_bytes(module + ".scale", {ceil_div(out, kFp8BlockSize), ceil_div(in, kFp8BlockSize)}, DType::kF8E8M0,
                 /*exponents=*/true);
}

void write_compressor(const TinySizes& m, TensorWriter& w, const std::string& p, uint64_t ratio, uint64_t head) {
  const uint64_t width = overlap(ratio) * head;
  w.weight(p + "ape", {ratio, width}, DType::kF32);
  w.weight(p + "wkv.weight", {width, m.hidden});
  w.weight(p + "wgate.weight", {width, m.hidden});
  w.norm(p + "norm", head);
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  const uint64_t h = m.hidden, mix = (2 + m.hc_mult) * m.hc_mult;
  w.weight("embed.weight", {m.vocab, h});
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const uint64_t ratio = static_cast<size_t>(l) < m.compress_ratio.size() ? m.compress_ratio[l] : 0;
    const std::string a = p + "attn.";
    projection(m, w, a + "wq_a", m.q_lora_rank, h);
    w.norm(a + "q_norm", m.q_lora_rank);
    projection(m, w, a + "wq_b", m.heads * m.head_dim, m.q_lora_rank);
    projection(m, w, a + "wkv", m.head_dim, h);
    w.norm(a + "kv_norm", m.head_dim);
    projection(m, w, a + "wo_a", m.o_groups * m.o_lora_rank, m.heads * m.head_dim / m.o_groups);
    projection(m, w, a + "wo_b", h, m.o_groups * m.o_lora_rank);
    w.weight(a + "attn_sink", {m.heads}, DType::kF32);
    if (ratio > 1) write_compressor(m, w, a + "compressor.", ratio, m.head_dim);
    if (ratio == 4) {
      projection(m, w, a + "indexer.wq_b", m.index_heads * m.index_head_dim, m.q_lora_rank);
      w.weight(a + "indexer.weights_proj.weight", {m.index_heads, h});
      write_compressor(m, w, a + "indexer.compressor.", ratio, m.index_head_dim);
    }
    const std::string f = p + "ffn.";
    w.weight(f + "gate.weight", {m.experts, h});
    if (l < m.hash_layers) {
      w.stored_bytes(f + "gate.tid2eid", {m.vocab, m.experts_per_token}, DType::kI32, false);
    } else if (m.score_bias) {
      w.bias(f + "gate.bias", {m.experts}, DType::kF32);
    }
    for (uint64_t x = 0; x < m.experts; ++x) {
      const std::string e = f + "experts." + std::to_string(x) + ".";
      for (const char* name : {"w1", "w2", "w3"}) {
        const bool down = name[1] == '2';
        const uint64_t out = down ? h : m.moe_intermediate, in = down ? m.moe_intermediate : h;
        if (m.mxfp4_experts) {
          w.stored_bytes(e + name + ".weight", {out, in / 2}, DType::kI8, false);
          w.stored_bytes(e + name + ".scale", {out, groups(in)}, DType::kF8E8M0, true);
        } else {
          w.projection(e + name, out, in);
        }
      }
    }
    const uint64_t shared = m.shared_experts * m.moe_intermediate;
    if (shared > 0) {
      projection(m, w, f + "shared_experts.w1", shared, h);
      projection(m, w, f + "shared_experts.w2", h, shared);
      projection(m, w, f + "shared_experts.w3", shared, h);
    }
    w.norm(p + "attn_norm", h);
    w.norm(p + "ffn_norm", h);
    w.weight(p + "hc_attn_fn", {mix, m.hc_mult * h}, DType::kF32);
    w.weight(p + "hc_attn_base", {mix}, DType::kF32);
    w.weight(p + "hc_attn_scale", {3}, DType::kF32);
    w.weight(p + "hc_ffn_fn", {mix, m.hc_mult * h}, DType::kF32);
    w.weight(p + "hc_ffn_base", {mix}, DType::kF32);
    w.weight(p + "hc_ffn_scale", {3}, DType::kF32);
  }
  w.norm("norm", h);
  if (!m.tie_embeddings) w.weight("head.weight", {m.vocab, h});
  w.weight("hc_head_fn", {m.hc_mult, m.hc_mult * h}, DType::kF32);
  w.weight("hc_head_base", {m.hc_mult}, DType::kF32);
  w.weight("hc_head_scale", {1}, DType::kF32);
}

bool moe_layer(const TinySizes&, int) { return true; }

}  // namespace

const Family& deepseek_v4_family() {
  static const Family family{
      .name = "deepseek_v4",
      .architectures = {"DeepseekV4ForCausalLM"},
      .expert_count_field = "n_routed_experts",
      .read_config = read_config,
      .table = table,
      .tiny_defaults = tiny_defaults,
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
      .no_fp8_checkpoints =
          "its Hub checkpoints are block FP8 with ue8m0 X.scale grids and MXFP4 routed experts (--quant mxfp4), "
          "not weight_scale_inv FP8",
      .tiny_mxfp4 = true,
      .checkpoint_layers = "layers.",
  };
  return family;
}

}  // namespace shardload::arch
