// Llama, Mistral and ERNIE-4.5 dense: attention with optional biases, a dense MLP.
#include "model/arch/family.h"

namespace shardload::arch {
namespace {

const ArchTable& table() {
  static const ArchTable table{
      .model = embedding_rules(),
      .layer = concat({norm_rules(), attention_rules(/*qk_norm=*/false), dense_mlp_rules()}),
      .skips = common_skips(),
  };
  return table;
}

void tiny_config(const TinySizes& m, nlohmann::json& c) {
  tiny_rope(c, 500000.0, 1e-5, 8192);
  c["head_dim"] = m.head_dim;
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["mlp_bias"] = false;
  c["pretraining_tp"] = 1;
  c["rope_scaling"] = nullptr;
}

void attention(const TinySizes& m, TensorWriter& w, const std::string& p) {
  write_attention(m, w, p, /*qkv_bias=*/false, /*qk_norm=*/false);
}

void tiny_tensors(const TinySizes& m, TensorWriter& w) {
  write_decoder_model(m, w,
                      {.attention = attention, .moe = nullptr, .moe_layer = tiny_no_moe_layer});
}

}  // namespace

const Family& llama_family() {
  static const Family family{
      .name = "llama",
      .architectures = {"LlamaForCausalLM", "MistralForCausalLM", "Ernie4_5ForCausalLM"},
      .expert_count_field = {},
      .read_config = [](const nlohmann::json&, ModelConfig&) {},
      .table = table,
      .tiny_defaults = [](TinySizes&) {},
      .tiny_block_fp8 = [](TinySizes&) {},
      .tiny_moe_layer = tiny_no_moe_layer,
      .tiny_config = tiny_config,
      .tiny_tensors = tiny_tensors,
  };
  return family;
}

}  // namespace shardload::arch
