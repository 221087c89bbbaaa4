// The default tiny model of each family and the rules that --layers / --experts change.

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "shardload/error.h"
#include "tiny/tiny_model.h"

namespace shardload::tiny {

namespace {

// Generous caps: enough for a 20k-tensor MoE, small enough to catch a typo before it fills a disk.
constexpr int kMaxLayers = 4096;
constexpr int kMaxExperts = 4096;

// Shared by every family: 8 query heads and 2 KV heads, so tp 4 and 8 need KV-head replication, and
// a vocabulary that is not a multiple of 64, so vocab padding shows.
TinyModel base(Family family) {
  TinyModel m;
  m.family = family;
  m.hidden = 128;
  m.intermediate = 384;
  m.heads = 8;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.vocab = 1000;
  m.layers = 3;
  return m;
}

// Routed experts divisible by ep 4 and 8; intermediate sizes divisible by 8 (tp 8).
void add_experts(TinyModel& m, uint64_t per_token) {
  m.experts = 8;
  m.experts_per_token = per_token;
  m.moe_intermediate = 64;
}

TinyModel deepseek(Family family, bool v3) {
  TinyModel m = base(family);
  m.kv_heads = m.heads;  // MLA checkpoints list num_key_value_heads = num_attention_heads
  m.head_dim = 0;        // DeepSeek configs have no head_dim
  add_experts(m, 2);
  m.shared_experts = v3 ? 1 : 2;
  m.first_moe_layer = 1;
  m.q_lora_rank = v3 ? 96 : 0;
  m.kv_lora_rank = 64;
  m.qk_nope_head_dim = 16;
  m.qk_rope_head_dim = 8;
  m.v_head_dim = 16;
  m.n_group = v3 ? 2 : 1;
  m.mtp_layers = v3 ? 1 : 0;
  return m;
}

}  // namespace

TinyModel default_model(Family family) {
  TinyModel m = base(family);
  switch (family) {
    case Family::kLlama:
      return m;
    case Family::kQwen2:
      m.intermediate = 352;
      return m;
    case Family::kQwen3:
      m.head_dim = 32;  // explicit and != hidden / heads, as in the real Qwen3 configs
      m.tie_embeddings = true;
      return m;
    case Family::kQwen2Moe:
      m.intermediate = 256;
      add_experts(m, 2);
      m.shared_intermediate = 128;
      return m;
    case Family::kQwen3Moe:
      m.head_dim = 32;
      m.layers = 4;
      add_experts(m, 2);
      m.mlp_only_layers = {0};
      return m;
    case Family::kMixtral:
      m.intermediate = 256;
      m.layers = 2;
      add_experts(m, 2);
      m.moe_intermediate = 0;  // Mixtral's experts use intermediate_size
      return m;
    case Family::kDeepseekV2:
      return deepseek(family, /*v3=*/false);
    case Family::kDeepseekV3:
      return deepseek(family, /*v3=*/true);
    case Family::kErnie45Moe:
      add_experts(m, 2);
      m.shared_experts = 2;
      m.first_moe_layer = 1;
      m.tie_embeddings = true;
      m.mtp_layers = 1;
      return m;
  }
  return m;
}

void apply_counts(TinyModel& m, int layers, int experts) {
  if (layers != -1) {
    if (layers < 1 || layers > kMaxLayers) {
      throw Error(ErrorKind::kInvalidArgument, "bad layer count",
                  {.field = "layers",
                   .expected = fmt::format("1..{}", kMaxLayers),
                   .found = std::to_string(layers)});
    }
    m.layers = layers;
    std::erase_if(m.mlp_only_layers, [&](int i) { return i >= layers; });
  }
  if (experts == -1) return;
  if (m.experts ==
      0) {  // silently ignoring it would hand back a dense model the caller did not ask for
    throw Error(ErrorKind::kInvalidArgument, "a dense family has no experts",
                {.field = "experts", .expected = "no --experts", .found = std::to_string(experts)});
  }
  if (experts < 1 || experts > kMaxExperts) {
    throw Error(ErrorKind::kInvalidArgument, "bad expert count",
                {.field = "experts",
                 .expected = fmt::format("1..{}", kMaxExperts),
                 .found = std::to_string(experts)});
  }
  m.experts = static_cast<uint64_t>(experts);
  m.experts_per_token = std::min(m.experts_per_token, m.experts);
  if (m.experts % m.n_group != 0) {
    m.n_group = 1;
    m.topk_group = 1;
  }
}

bool is_moe_layer(const TinyModel& m, int layer) {
  if (m.experts == 0) return false;
  switch (m.family) {
    case Family::kLlama:
    case Family::kQwen2:
    case Family::kQwen3:
      return false;
    case Family::kQwen2Moe:
    case Family::kQwen3Moe:
      return (layer + 1) % m.sparse_step == 0 &&
             std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) ==
                 m.mlp_only_layers.end();
    case Family::kMixtral:
      return true;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3:
      return layer >= m.first_moe_layer && layer % m.sparse_step == 0;
    case Family::kErnie45Moe:
      return (layer + 1) % m.sparse_step == 0 && layer >= m.first_moe_layer && layer < m.layers;
  }
  return false;
}

std::string_view family_name(Family family) {
  switch (family) {
    case Family::kLlama:
      return "llama";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen3:
      return "qwen3";
    case Family::kQwen2Moe:
      return "qwen2_moe";
    case Family::kQwen3Moe:
      return "qwen3_moe";
    case Family::kMixtral:
      return "mixtral";
    case Family::kDeepseekV2:
      return "deepseek_v2";
    case Family::kDeepseekV3:
      return "deepseek_v3";
    case Family::kErnie45Moe:
      return "ernie4_5_moe";
  }
  return "?";
}

std::optional<Family> parse_family(std::string_view name) {
  for (Family family : kAllFamilies) {
    if (family_name(family) == name) return family;
  }
  return std::nullopt;
}

}  // namespace shardload::tiny
