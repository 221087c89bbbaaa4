// The default tiny model of each family and the rules that --layers / --experts change.

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "shardload/error.h"
#include "tiny/tiny_model.h"

namespace shardload::tiny {

namespace {

// A generous cap: enough for a 20k-tensor MoE, small enough to catch a typo before it fills a disk.
constexpr int kMaxExperts = 4096;

}  // namespace

TinyModel default_model(const arch::Family& family) {
  TinyModel m;
  static_cast<arch::TinySizes&>(m) = arch::tiny_base_sizes();
  m.family = &family;
  family.tiny_defaults(m);
  // A family whose only class is multimodal (Kimi-K2.5) names its text model under its prefix.
  if (family.architectures.front() == family.multimodal_architecture) {
    m.weight_prefix = family.multimodal_weight_prefix;
  }
  return m;
}

void apply_counts(TinyModel& m, int layers, int experts) {
  if (layers != -1) {
    if (layers < 1 || layers > kMaxTinyLayers) {
      throw Error(ErrorKind::kInvalidArgument, "bad layer count",
                  {.field = "layers",
                   .expected = fmt::format("1..{}", kMaxTinyLayers),
                   .found = std::to_string(layers)});
    }
    m.layers = layers;
    std::erase_if(m.mlp_only_layers, [&](int i) { return i >= layers; });
  }
  if (experts == -1) return;
  if (experts == 0 && m.family->tiny_dense_variant) {  // the family's model without its MoE block
    m.experts = 0;
    return;
  }
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
  return m.experts > 0 && m.family->tiny_moe_layer(m, layer);
}

}  // namespace shardload::tiny
