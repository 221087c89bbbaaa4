// --size: grows a tiny model to about a target number of tensor bytes.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tiny/tiny_model.h"

namespace shardload::tiny {

namespace {

// Hidden sizes tried, smallest first; steps of at most 1.5x so that the intermediate sizes can take
// up the rest without leaving the family's proportions far behind.
constexpr uint64_t kHiddenLadder[] = {64,   128,  192,  256,  384,  512,  768,   1024,
                                      1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384};

// Divisible by 8 (tp 8) always, and by 128 in large models, like real checkpoints and 128-wide FP8
// blocks.
uint64_t round_dim(double size, bool large) {
  const double granule = large ? 128 : 8;
  const double rounded = std::round(size / granule) * granule;
  return static_cast<uint64_t>(std::max(rounded, granule));
}

// Head-like sizes stay even (RoPE pairs) and at least 4.
uint64_t round_head(double size) {
  return std::max<uint64_t>(4, static_cast<uint64_t>(std::round(size / 4)) * 4);
}

uint64_t scale_head(uint64_t size, double ratio) {
  return size == 0 ? 0 : round_head(static_cast<double>(size) * ratio);
}

uint64_t scale_dim(uint64_t size, double ratio, bool large) {
  return size == 0 ? 0 : round_dim(static_cast<double>(size) * ratio, large);
}

// Real models keep heads near 128 wide and add heads instead. Heads stay a multiple of 8 (tp 8) and
// GQA keeps its 2 KV heads, so that KV-head replication still shows at tp 4 and 8.
void split_wide_heads(TinyModel& m) {
  while (m.head_dim > 128 && m.head_dim % 16 == 0) {
    m.head_dim /= 2;
    m.heads *= 2;
  }
  while (m.qk_nope_head_dim > 128 && m.qk_nope_head_dim % 16 == 0 && m.v_head_dim % 16 == 0 &&
         m.qk_rope_head_dim % 8 == 0) {
    m.qk_nope_head_dim /= 2;
    m.v_head_dim /= 2;
    m.qk_rope_head_dim /= 2;
    m.heads *= 2;
    m.kv_heads = m.heads;
  }
  // Qwen3-Next's linear attention likewise: twice the key and value heads, so groups stay whole.
  while (m.linear_key_head_dim > 128 && m.linear_key_head_dim % 16 == 0 && m.linear_value_head_dim % 16 == 0) {
    m.linear_key_head_dim /= 2;
    m.linear_value_head_dim /= 2;
    m.linear_key_heads *= 2;
    m.linear_value_heads *= 2;
  }
}

// The base model with hidden = `hidden` (head sizes grow with it) and every intermediate size grown
// in proportion, times `factor`.
TinyModel scaled(const TinyModel& base, uint64_t hidden, double factor) {
  TinyModel m = base;
  const double ratio = static_cast<double>(hidden) / static_cast<double>(base.hidden);
  const bool large = hidden >= 1024;
  m.hidden = hidden;
  m.head_dim = scale_head(base.head_dim, ratio);
  m.qk_nope_head_dim = scale_head(base.qk_nope_head_dim, ratio);
  m.qk_rope_head_dim = scale_head(base.qk_rope_head_dim, ratio);
  m.v_head_dim = scale_head(base.v_head_dim, ratio);
  m.linear_key_head_dim = scale_head(base.linear_key_head_dim, ratio);
  m.linear_value_head_dim = scale_head(base.linear_value_head_dim, ratio);
  m.q_lora_rank = scale_dim(base.q_lora_rank, ratio, large);
  m.kv_lora_rank = scale_dim(base.kv_lora_rank, ratio, large);
  split_wide_heads(m);
  m.intermediate = scale_dim(base.intermediate, ratio * factor, large);
  m.moe_intermediate = scale_dim(base.moe_intermediate, ratio * factor, large);
  m.shared_intermediate = scale_dim(base.shared_intermediate, ratio * factor, large);
  return m;
}

double distance(uint64_t bytes, uint64_t target) {
  return std::abs(static_cast<double>(bytes) - static_cast<double>(target));
}

}  // namespace

void scale_to_size(TinyModel& model, uint64_t target_bytes) {
  const TinyModel base = model;
  // The largest hidden size whose model, at the family's proportions, still fits...
  uint64_t hidden = kHiddenLadder[0];
  for (uint64_t h : kHiddenLadder) {
    if (total_bytes(scaled(base, h, 1.0)) > target_bytes) break;
    hidden = h;
  }
  // ...then the intermediate sizes, to which the byte count is linear, take up the rest.
  const double at_one = static_cast<double>(total_bytes(scaled(base, hidden, 1.0)));
  const double at_two = static_cast<double>(total_bytes(scaled(base, hidden, 2.0)));
  double factor = 1.0;
  if (at_two > at_one) {
    factor = std::max(0.01, 1.0 + (static_cast<double>(target_bytes) - at_one) / (at_two - at_one));
  }
  TinyModel best = scaled(base, hidden, factor);
  uint64_t best_bytes = total_bytes(best);
  // Rounding to granules can overshoot; the neighbouring granules on either side may land closer.
  for (double nudge : {0.97, 1.03}) {
    TinyModel candidate = scaled(base, hidden, factor * nudge);
    const uint64_t bytes = total_bytes(candidate);
    if (distance(bytes, target_bytes) < distance(best_bytes, target_bytes)) {
      best = candidate;
      best_bytes = bytes;
    }
  }
  model = best;
}

}  // namespace shardload::tiny
