// Kimi-K2.5 / 2.6 / 2.7 (kimi_k25, KimiK25ForConditionalGeneration; docs/families/kimi_k25.md): the
// DeepSeek-V3 text model (deepseek.cc: latent attention, one shared expert, the router's score
// bias, first_k_dense_replace dense layers) beside a vision tower.
// - config.json nests the text model's fields under text_config (its model_type kimi_k2, read as
//   deepseek_v3); quantization_config is in text_config (Kimi's config class copies it to the top
//   when loaded; make-tiny writes it there): ModelConfig reads text_config's first, then the top's.
// - The checkpoint names the text model language_model.* (language_model.model.layers.N...,
//   language_model.lm_head.weight), vLLM 0.33's own parameter names; the vision tower
//   (vision_tower.*) and its projector (mm_projector.*) are skipped and named.
// - The routed experts are compressed-tensors pack-quantized int4 (W4A16, 32-value groups,
//   symmetric; src/model/quant/pack_quantized.cc), everything else bf16: the config's `ignore`
//   lists attention, the shared experts and the dense MLP. make-tiny writes the same split.
// - num_nextn_predict_layers is 0 on the Hub; MTP layers, were a checkpoint to carry them, are
//   skipped as DeepSeek-V3's.
#include "model/arch/deepseek.h"

namespace shardload::arch {
namespace {

using namespace deepseek;

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = layer_rules(/*score_bias=*/true),
      .skips = skips_with_mtp_layers(),
  };
  return table;
}

constexpr TinyLayerWriter kLayer{.attention = write_latent_attention,
                                 .moe = [](const TinySizes& m, TensorWriter& w,
                                           const std::string& l) { write_moe(m, w, l, true); },
                                 .moe_layer = moe_layer};

// DeepSeek-V3's sizes with Kimi-K2's routing: one expert group (n_group 1), no MTP layers.
void tiny_defaults(TinySizes& m) {
  deepseek::tiny_defaults(m, /*v3=*/true);
  m.n_group = 1;
  m.topk_group = 1;
  m.mtp_layers = 0;
}

// The Hub's outer fields, the DeepSeek-V3 text config under text_config (as Kimi's files spell it:
// model_type kimi_k2) and a small vision config in the Hub's own spelling (vt_*): nothing reads its
// sizes for the text model, and make-tiny writes no tower.
void tiny_config(const TinySizes& m, nlohmann::json& c) {
  nlohmann::json text = c;
  deepseek::tiny_config(m, text, /*v3=*/true);
  text["model_type"] = "kimi_k2";
  text["architectures"] = nlohmann::json::array({"DeepseekV3ForCausalLM"});
  text["rope_scaling"]["factor"] = 64;
  text["rope_theta"] = 50000.0;
  text["rms_norm_eps"] = 1e-5;
  text["routed_scaling_factor"] = 2.827;
  text["max_position_embeddings"] = 262144;
  nlohmann::json outer = {
      {"architectures", c["architectures"]},
      {"model_type", c["model_type"]},
      {"torch_dtype", c["torch_dtype"]},
      {"tie_word_embeddings", c["tie_word_embeddings"]},
      {"bos_token_id", c["bos_token_id"]},
      {"eos_token_id", c["eos_token_id"]},
      {"pad_token_id", kTinyPadTokenId},
      {"ignore_index", -100},
      {"media_placeholder_token_id", c["vocab_size"].get<uint64_t>() - 1},
      {"use_unified_vision_chunk", true},
      {"video_placeholder", "<|kimi_k25_video_placeholder|>"},
      {"transformers_version", c["transformers_version"]},
      {"text_config", std::move(text)},
      {"vision_config",
       {{"init_pos_emb_height", 8},
        {"init_pos_emb_time", 4},
        {"init_pos_emb_width", 8},
        {"merge_kernel_size", {2, 2}},
        {"merge_type", "sd2_tpool"},
        {"mm_hidden_size", 64},
        {"mm_projector_type", "patchmerger"},
        {"patch_size", 14},
        {"pos_emb_type", "divided_fixed"},
        {"projector_hidden_act", "gelu"},
        {"projector_ln_eps", 1e-5},
        {"text_hidden_size", m.hidden},
        {"video_attn_type", "spatial_temporal"},
        {"vt_hidden_size", 64},
        {"vt_intermediate_size", 128},
        {"vt_num_attention_heads", 2},
        {"vt_num_hidden_layers", 1}}},
  };
  c = std::move(outer);
}

}  // namespace

const Family& kimi_k25_family() {
  static const Family family{
      .name = "kimi_k25",
      .architectures = {"KimiK25ForConditionalGeneration"},
      .expert_count_field = "n_routed_experts",
      .read_config = deepseek::read_config,
      .table = table,
      .tiny_defaults = tiny_defaults,
      .tiny_block_fp8 = deepseek::tiny_block_fp8,
      .tiny_moe_layer = deepseek::moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = write_model_with_mtp<kLayer>,
      .multimodal_architecture = "KimiK25ForConditionalGeneration",
      .multimodal_weight_prefix = "language_model.",
      // The Hub's quantization_config.ignore: every linear but the routed experts stays bf16.
      .tiny_quant_ignore = {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"},
      .tiny_int32_weight_shape = true,
  };
  return family;
}

}  // namespace shardload::arch
