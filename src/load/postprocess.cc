// Post-processing of loaded modules, in place (../shared/spec/layout.md "FP8", fp8.md). It runs once per
// module after every tensor of the module arrived and marks the module processed, so that a later partial
// load cannot process untouched modules a second time (the engines' double-processing bug). Nothing is
// reallocated and no shape or dtype changes: the merged scales have their final shapes from the plan.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>

#include <fmt/format.h>

#include "shardload/fp8_quant.h"
#include "shardload/error.h"
#include "shardload/loader.h"

namespace shardload {
namespace {

struct ModuleParams {
  const PlanParam* weight = nullptr;
  const PlanParam* weight_scale = nullptr;
  const PlanParam* weight_scale_parts = nullptr;
  const PlanParam* input_scale = nullptr;
  const PlanParam* input_scale_parts = nullptr;
  const PlanParam* dynamic_source = nullptr;
};

// A rank's parameters are in module order (the planner emits each module's together).
ModuleParams find_params(const RankPlan& rank, uint32_t module) {
  ModuleParams out;
  const auto [first, last] = std::equal_range(
      rank.params.begin(), rank.params.end(), module, [](const auto& a, const auto& b) {
        if constexpr (std::is_same_v<std::decay_t<decltype(a)>, PlanParam>) {
          return a.module < b;
        } else {
          return a < b.module;
        }
      });
  for (auto it = first; it != last; ++it) {
    const PlanParam& param = *it;
    switch (param.role) {
      case ParamRole::kData: out.weight = &param; break;
      case ParamRole::kWeightScale: out.weight_scale = &param; break;
      case ParamRole::kWeightScaleParts: out.weight_scale_parts = &param; break;
      case ParamRole::kInputScale: out.input_scale = &param; break;
      case ParamRole::kInputScaleParts: out.input_scale_parts = &param; break;
      case ParamRole::kDynamicSource: out.dynamic_source = &param; break;
    }
  }
  return out;
}

std::span<float> floats(std::byte* base, const PlanParam& param) {
  return {reinterpret_cast<float*>(base + param.offset), param.nbytes / sizeof(float)};
}

float checked_scale(float scale, const PlanParam& table) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw Error(ErrorKind::kInvalidArgument, "an FP8 scale must be positive and finite",
                {.tensor = table.name, .expected = "> 0", .found = fmt::format("{}", scale)});
  }
  return scale;
}

// Every entry of a merged scale that belongs to slot j (1 for [1] and [El], 2 for w13's [El, 2]).
void fill_slot(std::span<float> merged, uint64_t slots, uint64_t j, float value) {
  const uint64_t per = merged.size() / slots;
  std::fill_n(merged.begin() + static_cast<ptrdiff_t>(j * per), per, value);
}

// Static per-tensor FP8: the parts of each slot (q/k/v, gate/up) are brought to their largest scale m,
// x = float(q) * s_k then q' = fp8(x / m), each step in float32, through a 256-entry table per part.
void requantize(const Plan& plan, const ModuleParams& p, std::byte* base, uint32_t module) {
  const std::vector<uint64_t>& part_rows = plan.modules[module].part_rows;
  const uint64_t slots = p.weight_scale_parts->shape[0];
  const uint64_t parts = p.weight_scale_parts->shape[1];
  const uint64_t cols = p.weight->shape.back();
  const uint64_t slot_bytes = p.weight->nbytes / slots;
  std::span<float> table = floats(base, *p.weight_scale_parts);
  std::span<float> merged = floats(base, *p.weight_scale);
  for (uint64_t j = 0; j < slots; ++j) {
    float m = 0;
    for (uint64_t k = 0; k < parts; ++k) m = std::max(m, checked_scale(table[j * parts + k], *p.weight_scale_parts));
    uint64_t row = 0;
    for (uint64_t k = 0; k < parts; ++k) {
      const float s = table[j * parts + k];
      const uint64_t rows = part_rows[k];
      if (s != m) {
        requantize_fp8_e4m3({reinterpret_cast<uint8_t*>(base + p.weight->offset + j * slot_bytes + row * cols),
                             rows * cols},
                            s, m);
      }
      row += rows;
    }
    fill_slot(merged, slots, j, m);
  }
  if (p.input_scale != nullptr) {
    float m = 0;
    for (float s : floats(base, *p.input_scale_parts)) m = std::max(m, checked_scale(s, *p.input_scale_parts));
    std::span<float> input = floats(base, *p.input_scale);
    std::fill(input.begin(), input.end(), m);
  }
}

// Dynamic FP8: per slot (the whole rank tensor, or one expert), s = max(amax, 1e-12) / 448 and
// q = fp8(w / s) in float32.
void quantize(const ModuleParams& p, std::byte* base) {
  const uint64_t slots = p.weight->shape.size() == 3 ? p.weight->shape[0] : 1;
  const uint64_t per_slot = p.weight->nbytes / slots;  // elements: one byte each
  std::span<float> source = floats(base, *p.dynamic_source);
  std::span<float> merged = floats(base, *p.weight_scale);
  auto* q = reinterpret_cast<uint8_t*>(base + p.weight->offset);
  for (uint64_t j = 0; j < slots; ++j) {
    const float s = quantize_fp8_e4m3(source.subspan(j * per_slot, per_slot), {q + j * per_slot, per_slot});
    fill_slot(merged, slots, j, s);
  }
}

}  // namespace

void postprocess_modules(const Plan& plan, RankWeights& weights, const std::vector<uint32_t>& modules,
                         PostprocessMode mode) {
  const RankPlan& rank = plan.ranks.at(static_cast<size_t>(weights.rank));
  weights.processed.resize(plan.modules.size(), 0);
  for (uint32_t module : modules) {
    if (mode == PostprocessMode::kOnce && weights.processed[module] != 0) continue;
    const PostProcess post = plan.modules[module].post;
    if (post != PostProcess::kNone) {
      const ModuleParams params = find_params(rank, module);
      if (post == PostProcess::kFp8Requantize) requantize(plan, params, weights.buffer.data(), module);
      if (post == PostProcess::kFp8Quantize) quantize(params, weights.buffer.data());
    }
    weights.processed[module] = 1;
  }
}

}  // namespace shardload
