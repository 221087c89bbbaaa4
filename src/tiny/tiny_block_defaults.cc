// The default tiny model of each family under --quant fp8-block. A TP split of a block-FP8 weight
// must fall on a multiple of 128 in the split dimension (layout.md), so for tp in {1,2,4} and ep in
// {1,2,4}: heads are 128 wide and there are 4 query heads (1 per rank at tp 4) and 2 KV heads (one,
// replicated, per rank at tp 2 and 4); dense, expert and shared intermediate sizes are multiples of
// 4 x 128; experts are 4, and fewer layers keep the checkpoint under 8 MiB.

#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

TinyModel block_fp8_model(const arch::Family& family) {
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
  family.tiny_block_fp8(m);  // e.g. fewer layers, or MLA's head sizes
  return m;
}

}  // namespace shardload::tiny
