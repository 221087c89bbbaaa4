// Post-processing of loaded modules, in place (docs/layout.md "FP8", fp8.md). It runs once per
// module after every tensor of the module arrived and marks the module processed, so that a later partial
// load cannot process untouched modules a second time (the engines' double-processing bug). Nothing is
// reallocated and no shape or dtype changes: the merged scales have their final shapes from the plan.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "shardload/convert.h"
#include "shardload/fp8_quant.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "load/postprocess_ranks.h"

namespace shardload {
namespace {

struct ModuleParams {
  const PlanParam* weight = nullptr;
  const PlanParam* weight_scale = nullptr;
  const PlanParam* weight_scale_parts = nullptr;
  const PlanParam* input_scale = nullptr;
  const PlanParam* input_scale_parts = nullptr;
  const PlanParam* dynamic_source = nullptr;
  std::vector<const PlanParam*> scales;  // every weight and input scale of the module, as read
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
      case ParamRole::kWeightScale:
        if (out.weight_scale == nullptr) out.weight_scale = &param;
        out.scales.push_back(&param);
        break;
      case ParamRole::kWeightScaleParts: out.weight_scale_parts = &param; break;
      case ParamRole::kInputScale:
        out.input_scale = &param;
        out.scales.push_back(&param);
        break;
      case ParamRole::kInputScaleParts: out.input_scale_parts = &param; break;
      case ParamRole::kDynamicSource: out.dynamic_source = &param; break;
      case ParamRole::kWeightAux: break;  // kept as read
    }
  }
  return out;
}

std::span<float> floats(std::byte* base, const PlanParam& param) {
  return {reinterpret_cast<float*>(base + param.offset), param.nbytes / sizeof(float)};
}

// Checks the FP8 scales read from a checkpoint, as every load, export and update does before the
// weights can go live: a scale must be positive and finite. An error names what a user can find:
// the checkpoint file and tensor, the block of a block scale, and the expert of an expert slot (not
// the internal [slots, parts] tables the values were gathered in).
class ScaleCheck {
 public:
  ScaleCheck(const Plan& plan, int rank, const std::byte* base, const Checkpoint* checkpoint)
      : plan_(plan), rank_(rank), base_(base), checkpoint_(checkpoint) {}

  // The value at byte `at` of `param` (a table or grid a piece filled, in its dtype: float32, or the
  // model dtype of packed integers' scales), checked.
  float operator()(const PlanParam& param, uint64_t at) const {
    float value = 0;
    if (param.dtype == DType::kF32) {
      std::memcpy(&value, base_ + param.offset + at, sizeof value);
    } else {
      convert(param.dtype, base_ + param.offset + at, DType::kF32, &value, 1);
    }
    if (!valid(value)) throw bad(param, at, value);
    return value;
  }

  // The `count` consecutive values from byte `at` of `param`, checked as one conversion to float32: a
  // 2 GB W4A16 checkpoint holds about 60 million bf16 group scales, which one call each made 7x slower
  // to load than its bytes (measured: bench/w4a16_report.md).
  void row(const PlanParam& param, uint64_t at, uint64_t count) const {
    if (count == 0) return;
    const std::byte* values = base_ + param.offset + at;
    const uint64_t size = dtype_bits(param.dtype) / 8;
    // bf16 and fp16: positive and finite is 0 < bits < the +infinity pattern, a test on the bits alone.
    if (param.dtype == DType::kBF16 || param.dtype == DType::kF16) {
      // The failures are or-ed into an integer: accumulated in a bool, g++ -O3 left the loop scalar (1.46 ns a
      // value against 0.27, measured on 192-value rows).
      const uint16_t infinity = param.dtype == DType::kBF16 ? 0x7F80 : 0x7C00;
      uint32_t failed = 0;
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, values + i * 2, 2);
        failed |= static_cast<uint16_t>(bits - 1) >= static_cast<uint16_t>(infinity - 1);
      }
      if (failed == 0) return;
    }
    thread_local std::vector<float> converted;
    const float* checked = reinterpret_cast<const float*>(values);
    if (param.dtype != DType::kF32 || reinterpret_cast<uintptr_t>(values) % alignof(float) != 0) {
      converted.resize(count);
      convert(param.dtype, values, DType::kF32, converted.data(), count);
      checked = converted.data();
    }
    bool good = true;
    for (uint64_t i = 0; i < count; ++i) good &= valid(checked[i]);
    if (good) return;
    for (uint64_t i = 0; i < count; ++i) {
      if (!valid(checked[i])) throw bad(param, at + i * size, checked[i]);
    }
  }

 private:
  // Positive and finite (NaN fails both comparisons): the one test of a single value and of a row.
  static bool valid(float v) { return v > 0 && v <= std::numeric_limits<float>::max(); }

  Error bad(const PlanParam& param, uint64_t at, float value) const {
    // The piece that put the value there: a [rows, cols] block of the source at dst_offset, its rows
    // dst_row_values() apart.
    const PlanPiece* piece = nullptr;
    const uint64_t size = dtype_bits(param.dtype) / 8;
    for (const PlanPiece& p : param.pieces) {
      if (at < p.dst_offset || at >= p.dst_offset + p.dst_span_values() * size) continue;
      if ((at - p.dst_offset) / size % p.dst_row_values() < p.cols()) piece = &p;
    }
    std::vector<std::string> where;
    ErrorDetails details{.expected = "> 0", .found = fmt::format("{}", value)};
    if (piece == nullptr) {
      details.tensor = param.name;  // no checkpoint tensor (cannot happen for a planned table)
    } else {
      const PlanSource& source = plan_.sources[piece->source];
      details.tensor = source.name;
      if (checkpoint_ != nullptr && source.file < checkpoint_->files().size()) {
        details.file = checkpoint_->files()[source.file].path();
      }
      if (plan_.modules[param.module].checks_scales && source.shape.size() >= 2) {  // a grid of scales
        const uint64_t index = (at - piece->dst_offset) / size;
        const uint64_t row = piece->row_begin + index / piece->dst_row_values();
        if (plan_.format.scales_per_row()) {  // per-channel: one scale per weight row
          where.push_back(fmt::format("row {}", row));
        } else {
          where.push_back(fmt::format("{} (row {}, column {})", plan_.format.pack_factor > 1 ? "group" : "block",
                                      row, piece->col_begin + index % piece->dst_row_values()));
        }
      }
    }
    const PlanModule& module = plan_.modules[param.module];
    if (module.moe_layer >= 0 && !param.shape.empty() && param.shape[0] > 0 &&
        plan_.format.every_expert_table(param.name)) {  // one row per logical expert, not per slot
      where.push_back(fmt::format("expert {}", at / (param.nbytes / param.shape[0])));
    } else if (module.moe_layer >= 0 && plan_.parallel.ep > 0 && !param.shape.empty() &&
        param.shape[0] > 0) {
      const RankPlan& rank = plan_.ranks.at(static_cast<size_t>(rank_));
      const uint64_t slots = param.shape[0];
      const uint64_t slot = at / (param.nbytes / slots);
      const int expert = plan_.physical_to_logical.at(static_cast<size_t>(module.moe_layer))
                             .at(static_cast<size_t>(rank.ep_rank) * slots + slot);
      where.push_back(fmt::format("expert {} (slot {} of rank {})", expert, slot, rank_));
    }
    details.field = fmt::format("{}", fmt::join(where, " of "));
    return Error(ErrorKind::kInvalidArgument,
                 fmt::format("{} weight scales must be positive and finite", plan_.format.family_name),
                 std::move(details));
  }

  const Plan& plan_;
  int rank_;
  const std::byte* base_;  // the rank's byte 0 (param offsets are from there)
  const Checkpoint* checkpoint_;
};

// The slots post-processing visits: `only` (an expert-filtered update rewrites those alone), or
// all `slots`.
std::vector<uint64_t> slot_list(uint64_t slots, const std::vector<uint64_t>* only) {
  if (only != nullptr) return *only;
  std::vector<uint64_t> all(slots);
  for (uint64_t j = 0; j < slots; ++j) all[j] = j;
  return all;
}

// Block FP8 keeps the checkpoint's scale grids as they are; every block is checked all the same
// (with `only`, the blocks of those slots: the others were not read).
void check_block_scales(const PlanParam& scale, const ScaleCheck& check,
                        const std::vector<uint64_t>* only) {
  const uint64_t slot_bytes = only != nullptr ? scale.nbytes / scale.shape[0] : 0;
  for (const PlanPiece& piece : scale.pieces) {
    if (only != nullptr &&
        std::find(only->begin(), only->end(), piece.dst_offset / slot_bytes) == only->end()) {
      continue;
    }
    const uint64_t size = dtype_bits(scale.dtype) / 8;
    for (uint64_t r = 0; r < piece.rows(); ++r) {
      check.row(scale, piece.dst_offset + r * piece.dst_row_values() * size, piece.cols());
    }
  }
}

// Every entry of a merged scale that belongs to slot j (1 for [1] and [El], 2 for w13's [El, 2]).
void fill_slot(std::span<float> merged, uint64_t slots, uint64_t j, float value) {
  const uint64_t per = merged.size() / slots;
  std::fill_n(merged.begin() + static_cast<ptrdiff_t>(j * per), per, value);
}

// Static per-tensor FP8: the parts of each slot (q/k/v, gate/up) are brought to their largest scale m,
// x = float(q) * s_k then q' = fp8(x / m), each step in float32, through a 256-entry table per part.
void requantize(const Plan& plan, const ModuleParams& p, std::byte* base, uint32_t module,
                const ScaleCheck& check, const std::vector<uint64_t>* only) {
  const std::vector<uint64_t>& part_rows = plan.modules[module].part_rows;
  const uint64_t slots = p.weight_scale_parts->shape[0];
  const uint64_t parts = p.weight_scale_parts->shape[1];
  const uint64_t cols = p.weight->shape.back();
  const uint64_t slot_bytes = p.weight->nbytes / slots;
  std::span<float> table = floats(base, *p.weight_scale_parts);
  std::span<float> merged = floats(base, *p.weight_scale);
  for (uint64_t j : slot_list(slots, only)) {
    float m = 0;
    for (uint64_t k = 0; k < parts; ++k)
      m = std::max(m, check(*p.weight_scale_parts, (j * parts + k) * sizeof(float)));
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
    // Over every slot of the rank, the ones `only` leaves out too (their rows of the table are the
    // live ones).
    float m = 0;
    for (uint64_t i = 0; i < p.input_scale_parts->nbytes / sizeof(float); ++i) {
      m = std::max(m, check(*p.input_scale_parts, i * sizeof(float)));
    }
    std::span<float> input = floats(base, *p.input_scale);
    std::fill(input.begin(), input.end(), m);
  }
}

// Dynamic FP8: per slot (the whole rank tensor, or one expert), s = max(amax, kFp8AmaxFloor) /
// kFp8E4m3Max and q = fp8(w / s) in float32.
void quantize(const ModuleParams& p, std::byte* base, const std::vector<uint64_t>* only) {
  const uint64_t slots = p.weight->shape.size() == 3 ? p.weight->shape[0] : 1;
  const uint64_t per_slot = p.weight->nbytes / slots;  // elements: one byte each
  std::span<float> source = floats(base, *p.dynamic_source);
  std::span<float> merged = floats(base, *p.weight_scale);
  auto* q = reinterpret_cast<uint8_t*>(base + p.weight->offset);
  for (uint64_t j : slot_list(slots, only)) {
    const float s = quantize_fp8_e4m3(source.subspan(j * per_slot, per_slot), {q + j * per_slot, per_slot});
    fill_slot(merged, slots, j, s);
  }
}

// Post-processes one module of a rank (with `only`, only those expert slots of a routed-expert
// module).
void process_module(const Plan& plan, const RankPlan& rank, std::byte* base, uint32_t module,
                    const ScaleCheck& check, const std::vector<uint64_t>* only) {
  const PlanModule& planned = plan.modules[module];
  if (!planned.needs_postprocess()) return;
  const ModuleParams params = find_params(rank, module);
  if (planned.post == PostProcess::kFp8Requantize) requantize(plan, params, base, module, check, only);
  if (planned.post == PostProcess::kFp8Quantize) quantize(params, base, only);
  if (planned.checks_scales) {
    for (const PlanParam* scale : params.scales) check_block_scales(*scale, check, only);
  }
}

}  // namespace

void postprocess_modules(const Plan& plan, RankWeights& weights,
                         const std::vector<uint32_t>& modules, PostprocessMode mode,
                         const Checkpoint* checkpoint) {
  weights.processed.resize(plan.modules.size(), 0);
  load::postprocess_modules_at(plan, weights.rank, weights.buffer.data(), weights.processed, modules,
                               mode, checkpoint);
}

namespace load {

void postprocess_modules_at(const Plan& plan, int rank_index, std::byte* base,
                            std::vector<uint8_t>& processed, const std::vector<uint32_t>& modules,
                            PostprocessMode mode, const Checkpoint* checkpoint) {
  const RankPlan& rank = plan.ranks.at(static_cast<size_t>(rank_index));
  processed.resize(plan.modules.size(), 0);
  const ScaleCheck check(plan, rank_index, base, checkpoint);
  for (uint32_t module : modules) {
    if (mode == PostprocessMode::kOnce && processed[module] != 0) continue;
    process_module(plan, rank, base, module, check, nullptr);
    processed[module] = 1;
  }
}

void postprocess_expert_slots(const Plan& plan, int rank_index, std::byte* base, uint32_t module,
                              const std::vector<uint64_t>& slots, const Checkpoint* checkpoint) {
  const ScaleCheck check(plan, rank_index, base, checkpoint);
  process_module(plan, plan.ranks.at(static_cast<size_t>(rank_index)), base, module, check, &slots);
}

}  // namespace load
}  // namespace shardload
