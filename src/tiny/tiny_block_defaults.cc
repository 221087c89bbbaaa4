// The default tiny model of each family under --quant fp8-block. A TP split of a block-FP8 weight
// must fall on a multiple of 128 in the split dimension (layout.md), so for tp in {1,2,4} and ep in
// {1,2,4}: heads are 128 wide and there are 4 query heads (1 per rank at tp 4) and 2 KV heads (one,
// replicated, per rank at tp 2 and 4); dense, expert and shared intermediate sizes are multiples of
// 4 x 128; experts are 4, and fewer layers keep the checkpoint under 8 MiB.

#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

TinyModel block_fp8_model(Family family) {
  TinyModel m = default_model(family);  // the family's shape: tied head, dense layers, MTP, ...
  m.quant = Quant::kFp8Block;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = kFp8Block;
  m.hidden = 2 * kFp8Block;  // two block columns in every projection's input
  m.intermediate = 4 * kFp8Block;
  if (m.experts > 0) {
    m.experts = 4;
    m.moe_intermediate = 4 * kFp8Block;
  }
  switch (family) {
    case Family::kLlama:
    case Family::kQwen3:
      return m;
    case Family::kQwen3Moe:
    case Family::kErnie45Moe:
      m.layers = 2;  // layer 0 dense (mlp_only_layers / moe_layer_start_index), layer 1 MoE
      return m;
    case Family::kQwen2:
    case Family::kQwen2Moe:
    case Family::kMixtral:
      // Their configs have no head_dim, which is then hidden / heads: 512, so the MoE ones get one
      // layer to stay small.
      m.hidden = m.heads * m.head_dim;
      m.layers = family == Family::kQwen2 ? 2 : 1;
      if (family == Family::kQwen2Moe) m.shared_intermediate = 4 * kFp8Block;
      if (family == Family::kMixtral) m.moe_intermediate = 0;  // experts use intermediate_size
      return m;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3:
      // MLA with 8 heads, so that at tp 4 each rank's 2 heads of q (2 x 192 rows), kv_b (2 x 192
      // rows) and o_proj (2 x 64 columns) are whole blocks. kv_a_proj_with_mqa (128 + 64 rows) is
      // replicated, so its partial edge block is never split; V3 fuses it after q_a (128 rows).
      m.heads = 8;
      m.kv_heads = m.heads;
      m.head_dim = 0;
      m.qk_nope_head_dim = kFp8Block;
      m.qk_rope_head_dim = kFp8Block / 2;
      m.v_head_dim = kFp8Block / 2;
      m.kv_lora_rank = kFp8Block;
      m.q_lora_rank = m.q_lora_rank == 0 ? 0 : kFp8Block;
      m.layers = 2;  // layer 0 dense, layer 1 MoE (and V3's MoE MTP layer)
      return m;
  }
  return m;
}

}  // namespace shardload::tiny
