// Turns a checkpoint, its architecture table and a layout into per-rank block copies.
#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "core/shape_text.h"
#include "model/arch/family.h"
#include "model/arch_table.h"
#include "shard/config_plan.h"
#include "shard/vocab_padding.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using arch::Band;
using arch::Group;
using arch::Keep;
using arch::ParamRule;
using arch::Part;
using arch::Split;
using arch::When;

// prefix + pattern with every "{E}" replaced by `expert`, built in one allocation (a MoE model
// names tens of thousands of sources).
std::string source_name(std::string_view prefix, std::string_view pattern, size_t expert) {
  constexpr std::string_view kHole = "{E}";
  char digits[24];
  const std::string_view number(digits, std::to_chars(digits, digits + sizeof digits, expert).ptr);
  std::string name;
  name.reserve(prefix.size() + pattern.size() + number.size());
  name.append(prefix);
  for (size_t at = pattern.find(kHole); at != std::string_view::npos; at = pattern.find(kHole)) {
    name.append(pattern.substr(0, at)).append(number);
    pattern.remove_prefix(at + kHole.size());
  }
  name.append(pattern);
  return name;  // not `return name.append(...)`: that copies the string
}

bool applies(When when, const ModelConfig& m, int layer) {
  const bool moe_layer = layer >= 0 && m.moe_layer[static_cast<size_t>(layer)];
  switch (when) {
    case When::kAlways: return true;
    case When::kUntiedHead: return !m.tie_embeddings;
    case When::kDenseMlpLayer: return !moe_layer;
    case When::kMoeLayer: return moe_layer;
    case When::kMoeShared: return moe_layer && m.shared_intermediate > 0;
    case When::kQLora: return m.q_lora_rank > 0;
    case When::kNoQLora: return m.q_lora_rank == 0;
    case When::kAttentionBias: return m.attention_bias;
    case When::kQkvBias: return m.attention_bias || m.qkv_bias;
    case When::kMlpBias: return m.mlp_bias && !moe_layer;
    case When::kStoredExperts: return moe_layer && m.expert_format != nullptr;
    case When::kLinearExperts: return moe_layer && m.expert_format == nullptr;
    case When::kLinearAttentionLayer: return layer >= 0 && m.linear_layer[static_cast<size_t>(layer)];
    case When::kFullAttentionLayer: return layer >= 0 && !m.linear_layer[static_cast<size_t>(layer)];
    case When::kStackedExperts: return moe_layer && m.stacked_experts;
    case When::kPerExpertTensors: return moe_layer && !m.stacked_experts;
  }
  return false;
}

bool applies(const ParamRule& rule, const ModelConfig& m, int layer) {
  return applies(rule.when, m, layer) && (rule.in_layer == nullptr || rule.in_layer(m, layer));
}

// One applicable rule, for one layer (or the model), with its source names resolved.
struct Instance {
  const ParamRule* rule = nullptr;
  int layer = -1;      // -1: a model-level parameter
  int moe_layer = -1;  // row of physical_to_logical for expert parameters
  std::string target;
  // sources[x][k]: part k for logical expert x (one row for non-expert parameters). Each name
  // moves into its PlanSource once resolved (the id tables below then stand for it).
  std::vector<std::vector<std::string>> sources;
  // A quantized layer: for each of the format's companion tensors read from the checkpoint (its
  // scales), their names like `sources` (no rows for one made at load).
  std::vector<std::vector<std::vector<std::string>>> companions;
  // The same tables as indices into Plan::sources, filled once the checkpoint is checked, so that
  // planning each rank looks nothing up by name.
  std::vector<std::vector<uint32_t>> source_ids;
  std::vector<std::vector<std::vector<uint32_t>>> companion_ids;
  bool quantized = false;  // a linear layer in the plan's weight format (from the checkpoint or at load)
};

// "X.weight" -> "X.<suffix>", "X.w13_weight" -> "X.w13_<suffix>".
std::string with_suffix(std::string_view weight_name, std::string_view suffix) {
  weight_name.remove_suffix(std::string_view("weight").size());
  std::string name;
  name.reserve(weight_name.size() + suffix.size());
  name.append(weight_name).append(suffix);
  return name;
}

constexpr uint32_t kMissing = UINT32_MAX;  // no checkpoint tensor / no source id yet

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

struct Block {
  uint64_t row_begin, row_end, col_begin, col_end;
  uint64_t out_rows;  // rows the part takes in the rank tensor (> row_end - row_begin when padded)
  uint32_t divisor;
};

// A part's matrix as the rank tensor sees it, for one expert: [rows, cols] after taking the expert
// of a stacked source, transposing and taking the band. Split rules cut this view.
struct PartView {
  uint64_t rows = 1;
  uint64_t cols = 1;
  uint64_t band_row = 0;     // the band's first row in the whole (transposed) matrix
  uint64_t expert_rows = 0;  // a stacked source's matrix rows per expert (its [x] starts at x * this)
};

// `k_first`: the source stores the matrix input-major ([K, N], WeightFormat::k_first); the view is [N, K].
PartView part_view(const Part& part, const PlanSource& src, const std::string& target, bool k_first = false) {
  const Shape& shape = src.shape;
  PartView view;
  if (part.stacked && shape.size() < 2) {
    throw Error(ErrorKind::kShapeMismatch, "a fused experts tensor needs an expert dimension",
                {.tensor = src.name, .field = target, .expected = "[experts, ...]", .found = shape_text(shape)});
  }
  // Per expert: the dimensions after the expert one (no copy: the planner asks this for every piece).
  const auto first = shape.begin() + (part.stacked ? 1 : 0);
  view.rows = first == shape.end() ? 1 : *first;
  view.cols = std::accumulate(first == shape.end() ? first : first + 1, shape.end(), uint64_t{1},
                              std::multiplies<>());
  view.expert_rows = view.rows;
  if (part.transposed || k_first) std::swap(view.rows, view.cols);
  if (part.band != Band::kAll) {
    if (view.rows % 2 != 0) {
      throw Error(ErrorKind::kShapeMismatch, "a fused gate/up tensor needs an even size to halve",
                  {.tensor = src.name, .field = target, .expected = "an even size",
                   .found = std::to_string(view.rows)});
    }
    view.rows /= 2;
    if (part.band == Band::kSecondHalf) view.band_row = view.rows;
  }
  return view;
}

class Planner {
 public:
  Planner(const Checkpoint& ckpt, const ParallelConfig& parallel) : ckpt_(&ckpt) {
    if (!ckpt.has_config()) {
      throw Error(ErrorKind::kConfig, "a model directory with config.json is needed",
                  {.file = ckpt.path()});
    }
    start(ckpt.config(), parallel);
    probe_stacked_experts();
  }

  // Without a checkpoint (plan_from_config): every source is assumed, as config.json implies it.
  Planner(const nlohmann::json& config, const ParallelConfig& parallel,
          std::function<bool(std::string_view)> optional_present)
      : optional_present_(std::move(optional_present)) {
    start(config, parallel);
  }

  Plan run() {
    instantiate();
    check_consumed();
    plan_modules();
    for (int r = 0; r < plan_.parallel.tp; ++r) plan_.ranks.push_back(plan_rank(r));
    return std::move(plan_);
  }

 private:
  void start(const nlohmann::json& config, const ParallelConfig& parallel) {
    plan_.model = ModelConfig::from_json(config);
    plan_.format = weight_format(plan_.model, parallel.quantize_fp8);
    plan_.quantization = plan_.format.quantization;
    plan_.parallel = parallel;
    validate_layout(plan_.model, parallel);
    plan_.moe_tp = parallel.tp / parallel.ep;
    plan_.dtype = parallel.dtype.value_or(plan_.model.dtype);
    build_expert_map();
  }

  // A family that reads its routed experts either one a tensor or fused (Family::stacked_experts_tensor):
  // the checkpoint's first MoE layer says which. Without a checkpoint, one a tensor.
  void probe_stacked_experts() {
    ModelConfig& m = plan_.model;
    const std::string_view fused = m.family->stacked_experts_tensor;
    if (fused.empty() || !m.is_moe()) return;
    for (int layer = 0; layer < m.layers; ++layer) {
      if (!m.moe_layer[static_cast<size_t>(layer)]) continue;
      m.stacked_experts =
          ckpt_->find(outer_name(fmt::format("model.layers.{}.{}", layer, fused))) != nullptr;
      return;
    }
  }

  const ModelConfig& model() const { return plan_.model; }
  const WeightFormat& format() const { return plan_.format; }

  void build_expert_map() {
    const ModelConfig& m = model();
    if (!m.is_moe()) return;
    const ParallelConfig& p = plan_.parallel;
    if (!p.expert_map.empty()) {
      plan_.physical_to_logical = p.expert_map;
    } else {
      const int physical = static_cast<int>(m.experts) + p.redundant_experts.value_or(0);
      std::vector<int> row(static_cast<size_t>(physical));
      for (int i = 0; i < physical; ++i) row[static_cast<size_t>(i)] = i % static_cast<int>(m.experts);
      plan_.physical_to_logical.assign(static_cast<size_t>(m.moe_layer_count()), row);
    }
    plan_.physical_experts =
        plan_.physical_to_logical.empty() ? 0 : static_cast<int>(plan_.physical_to_logical[0].size());
  }

  // Whether the checkpoint holds this linear layer quantized, as ModelConfig::module_quantized says,
  // alike for every part and expert (a fused layer half quantized and half not cannot be one rank
  // tensor).
  bool checkpoint_quantizes(const Instance& inst) const {
    const bool by_tensors = format().quantized_where_stored && ckpt_ != nullptr;
    std::optional<bool> all;
    std::string first;
    for (const auto& names : inst.sources) {
      for (const std::string& name : names) {
        const std::string_view module = std::string_view(name).substr(0, name.rfind('.'));
        const bool quantized = by_tensors ? ckpt_->find(with_suffix(name, format().weight_suffix)) != nullptr
                                          : model().module_quantized(module);
        if (all && *all != quantized) {
          throw Error(ErrorKind::kConfig,
                      "the parts of one fused layer must all be quantized alike (quantization_config "
                      "targets and ignore)",
                      {.file = "config.json", .tensor = name, .field = inst.target,
                       .expected = fmt::format("{} like {}", *all ? quantized_name() : "unquantized", first),
                       .found = quantized ? quantized_name() : "unquantized"});
        }
        if (!all) first = std::string(module);
        all = quantized;
      }
    }
    return all.value_or(true);
  }

  // A model-level name as the checkpoint spells it (a multimodal checkpoint's text-model prefix);
  // layer rules get theirs in `prefix`.
  std::string outer_name(std::string name) const {
    if (model().weight_prefix.empty()) return name;
    return arch::checkpoint_name(*model().family, model().weight_prefix, name);
  }

  // `prefix`: the rank tensors' layer prefix ("model.layers.N."); `source_prefix`: the checkpoint's.
  void add_instance(const ParamRule& rule, int layer, int moe_layer, const std::string& prefix,
                    const std::string& source_prefix) {
    Instance inst;
    inst.rule = &rule;
    inst.layer = layer;
    inst.moe_layer = moe_layer;
    const bool model_level = layer < 0;
    inst.target = model_level ? outer_name(rule.target) : prefix + rule.target;
    const size_t experts = rule.group == Group::kExperts ? model().experts : 1;
    inst.sources.reserve(experts);
    for (size_t x = 0; x < experts; ++x) {
      std::vector<std::string>& names = inst.sources.emplace_back();
      names.reserve(rule.parts.size());
      for (const Part& part : rule.parts) {
        names.push_back(model_level ? outer_name(source_name("", part.source, x))
                                    : source_name(source_prefix, part.source, x));
      }
    }
    inst.quantized = format().quantizes() && rule.keep != Keep::kCheckpoint &&
                     arch::is_linear_weight(rule.target) && checkpoint_quantizes(inst);
    inst.companions.resize(inst.quantized ? format().companions.size() : 0);
    for (size_t c = 0; c < inst.companions.size(); ++c) {
      const std::string& suffix = format().companions[c].checkpoint_suffix;
      if (suffix.empty()) continue;  // made at load
      for (size_t x = 0; x < experts; ++x) {
        std::vector<std::string>& names = inst.companions[c].emplace_back();
        for (const std::string& name : inst.sources[x]) names.push_back(with_suffix(name, suffix));
      }
    }
    if (inst.quantized && format().weight_suffix != "weight") {  // packed codes under their own name
      for (auto& names : inst.sources) {
        for (std::string& name : names) name = with_suffix(name, format().weight_suffix);
      }
    }
    if (rule.optional && ckpt_ == nullptr) {
      if (!optional_present_(inst.target)) return;
    } else if (rule.optional) {
      for (const auto& names : inst.sources) {
        for (const std::string& name : names) {
          if (ckpt_->find(name) == nullptr) return;  // absent optional parameter: not exported
        }
      }
    }
    instances_.push_back(std::move(inst));
  }

  void instantiate() {
    const arch::ArchTable& table = arch::table_for(model().family);
    for (const ParamRule& rule : table.model) {
      if (applies(rule, model(), -1)) add_instance(rule, -1, -1, "", "");
    }
    int moe_index = 0;
    for (int layer = 0; layer < model().layers; ++layer) {
      const std::string prefix = outer_name(fmt::format("model.layers.{}.", layer));
      // The checkpoint's own spelling of the layers where the family's differs (DeepSeek-V4's "layers.N.").
      const std::string_view layers = model().family->checkpoint_layers;
      const std::string source_prefix = layers.empty() ? prefix : fmt::format("{}{}.", layers, layer);
      const bool moe_layer = model().moe_layer[static_cast<size_t>(layer)];
      for (const ParamRule& rule : table.layer) {
        if (applies(rule, model(), layer)) {
          add_instance(rule, layer, moe_layer ? moe_index : -1, prefix, source_prefix);
        }
      }
      if (moe_layer) ++moe_index;
    }
  }

  // Every checkpoint tensor is consumed by a parameter or skipped by a stated rule; every source exists
  // with the shape config.json implies and a dtype shardload can convert.
  void check_consumed() {
    // First the checkpoint position of every name (one lookup each: a MoE model has tens of
    // thousands of sources), in the id tables; kMissing for a name the checkpoint lacks.
    std::vector<bool> consumed(ckpt_ == nullptr ? 0 : ckpt_->tensor_names().size(), false);
    entry_of_tensor_.assign(consumed.size(), nullptr);
    const auto locate = [&](const std::vector<std::vector<std::string>>& table,
                            std::vector<std::vector<uint32_t>>& ids) {
      ids.reserve(table.size());
      for (const auto& names : table) {
        std::vector<uint32_t>& row = ids.emplace_back();
        row.reserve(names.size());
        for (const std::string& name : names) {
          const Checkpoint::Entry* entry = ckpt_ == nullptr ? nullptr : ckpt_->find(name);
          row.push_back(entry == nullptr ? kMissing : entry->index);
          if (entry == nullptr) continue;
          consumed[entry->index] = true;
          entry_of_tensor_[entry->index] = entry;
        }
      }
    };
    for (Instance& inst : instances_) {
      locate(inst.sources, inst.source_ids);
      inst.companion_ids.resize(inst.companions.size());
      for (size_t c = 0; c < inst.companions.size(); ++c) locate(inst.companions[c], inst.companion_ids[c]);
    }
    const arch::ArchTable& table = arch::table_for(model().family);
    for (size_t i = 0; i < consumed.size(); ++i) {
      if (consumed[i]) continue;
      const std::string& name = ckpt_->tensor_names()[i];
      // Skip rules read names as a text-only checkpoint spells them; a multimodal checkpoint's
      // other towers are skipped whole.
      const std::optional<std::string> text_name =
          arch::text_model_name(*model().family, model().weight_prefix, name);
      const bool unread = std::any_of(format().unread_suffixes.begin(), format().unread_suffixes.end(),
                                      [&](const std::string& suffix) {
                                        return name.size() > suffix.size() && name.ends_with(suffix) &&
                                               name[name.size() - suffix.size() - 1] == '.';
                                      });
      const bool skipped =
          unread || !text_name || std::any_of(table.skips.begin(), table.skips.end(), [&](const arch::SkipRule& s) {
            return s.matches(*text_name, model());
          });
      if (!skipped) {
        throw Error(ErrorKind::kUnknownTensor,
                    fmt::format("no rule of {} consumes or skips it", model().architecture),
                    {.file = file_name(name), .tensor = name});
      }
      plan_.skipped.push_back(name);
    }
    // Then the ids into Plan::sources, in table order, so that the first missing tensor reported is
    // the first a reader would look for.
    source_of_tensor_.assign(consumed.size(), kMissing);
    plan_.sources.reserve(consumed.size());
    for (Instance& inst : instances_) {
      std::vector<Shape> shapes;  // per part: what config.json implies
      for (const Part& part : inst.rule->parts) shapes.push_back(part.shape(model()));
      // Packed codes are stored with K / pack_factor words (companions follow the values' shapes).
      std::vector<Shape> stored = shapes;
      if (inst.quantized && format().pack_factor > 1) {
        for (size_t k = 0; k < stored.size(); ++k) stored[k] = packed_shape(inst, k, shapes[k]);
      }
      // Part k of every row of a table expects shapes[k]; the id table turns from checkpoint
      // positions into source ids (and a source's name moves into its PlanSource).
      const bool codes = inst.rule->keep == Keep::kCheckpoint;  // stored bytes, kept as they are
      const auto resolve = [&](std::vector<std::vector<std::string>>& table,
                               std::vector<std::vector<uint32_t>>& ids,
                               const std::vector<Shape>& part_shapes, DType assumed,
                               std::optional<DType> exact, std::optional<DType> alt = std::nullopt) {
        for (size_t x = 0; x < table.size(); ++x) {
          for (size_t k = 0; k < table[x].size(); ++k) {
            ids[x][k] = source_index(table[x][k], ids[x][k], part_shapes[k], assumed, exact, alt);
          }
        }
      };
      // Without a checkpoint, the dtype a source is assumed to have: it decides no rank tensor but
      // kept codes'.
      const bool coded_source = inst.quantized && !format().quantized_at_load();
      // Integer codes (packed words) are no float to convert: copied as stored, in that dtype only.
      const std::optional<DType> integer_codes =
          coded_source && !is_convertible_float(*format().checkpoint_dtype) ? format().checkpoint_dtype
                                                                            : std::nullopt;
      resolve(inst.sources, inst.source_ids, stored,
              codes ? inst.rule->stored : coded_source ? *format().checkpoint_dtype : model().dtype,
              codes ? std::optional<DType>(inst.rule->stored) : integer_codes);
      if (codes && inst.rule->rank_as) {  // the same bytes under the engine's label (ParamRule::rank_as)
        for (const auto& ids : inst.source_ids) {
          for (const uint32_t id : ids) relabel(plan_.sources[id], *inst.rule->rank_as);
        }
      }
      for (size_t c = 0; c < inst.companions.size(); ++c) {
        const CompanionTensor& companion = format().companions[c];
        const bool converted =
            inst.rule->group == Group::kExperts && companion.expert_dtype != CompanionDtype::kStored;
        resolve(inst.companions[c], inst.companion_ids[c], companion_shapes(companion, shapes),
                companion.stored_dtype.value_or(DType::kF32), companion.stored_dtype,
                converted ? companion.expert_alt_dtype : std::nullopt);
      }
      if (coded_source) {
        for (const auto& ids : inst.source_ids) {
          for (const uint32_t id : ids) require_checkpoint_dtype(plan_.sources[id]);
        }
      }
      for (const auto& ids : inst.source_ids) {  // plan_from_config assumes a source per use
        for (size_t k = 0; k < ids.size(); ++k) set_part_view(inst, inst.rule->parts[k], plan_.sources[ids[k]]);
      }
    }
  }

  // The shape config.json implies for a companion of each part of shapes `parts`: a block grid, a
  // part's shape (one value per dimension), or a scalar ([1] accepted too).
  std::vector<Shape> companion_shapes(const CompanionTensor& companion, const std::vector<Shape>& parts) const {
    std::vector<Shape> out;
    for (const Shape& shape : parts) {
      if (companion.layout == CompanionLayout::kWholeLastNamed) {
        out.push_back({shape.size()});
        continue;
      }
      if (companion.layout != CompanionLayout::kBlockGrid) {
        out.push_back({});
        continue;
      }
      const uint64_t rows = shape.empty() ? 1 : shape[0];
      const uint64_t cols = shape.size() <= 1 ? 1 : shape[1];
      Shape grid{ceil_div(rows, grid_block_rows(companion)), ceil_div(cols, grid_block_cols(companion))};
      if (format().k_first) std::swap(grid[0], grid[1]);  // stored input-major, [K blocks, N blocks]
      out.push_back(std::move(grid));
    }
    return out;
  }

  uint64_t grid_block_rows(const CompanionTensor& c) const { return c.block_rows ? c.block_rows : format().block_rows; }
  uint64_t grid_block_cols(const CompanionTensor& c) const { return c.block_cols ? c.block_cols : format().block_cols; }

  // A companion's dtype on a rank (a routed experts' layer: `experts`).
  DType companion_dtype(const CompanionTensor& c, bool experts) const {
    switch (experts ? c.expert_dtype : c.dtype) {
      case CompanionDtype::kF32: return DType::kF32;
      case CompanionDtype::kModel: return plan_.dtype;
      case CompanionDtype::kStored: return c.stored_dtype.value_or(DType::kF32);
    }
    return DType::kF32;
  }

  // Part k of a layer of packed codes: [N, K] holds K / pack_factor words a row. A K that is not a
  // whole number of words cannot be stored so: refused before any read.
  Shape packed_shape(const Instance& inst, size_t k, Shape shape) const {
    const uint64_t pack = format().pack_factor;
    // The packed dimension: K (the last), or N (the one before it) for words of outputs.
    const bool outputs = format().packs_outputs;
    const size_t dim = outputs && shape.size() >= 2 ? shape.size() - 2 : shape.size() - 1;
    if (shape.empty() || shape[dim] % pack != 0) {
      throw Error(ErrorKind::kShapeMismatch,
                  fmt::format("{} weights pack {} values a word: the {} of a layer must be whole words",
                              quantized_name(), pack, outputs ? "outputs" : "inputs"),
                  {.file = "config.json", .tensor = inst.sources.front()[k], .field = inst.target,
                   .expected = fmt::format("{} a multiple of {}", outputs ? "outputs" : "inputs", pack),
                   .found = shape_text(shape)});
    }
    shape[dim] /= pack;
    if (format().k_first && shape.size() >= 2) std::swap(shape[shape.size() - 2], shape.back());
    return shape;
  }

  // What a refusal calls a quantized layer: "FP8".
  std::string quantized_name() const { return format().family_name; }

  // Whether the instance's weight and block grids are stored and kept input-major (WeightFormat::k_first).
  bool k_first(const Instance& inst) const { return inst.quantized && format().k_first; }

  std::string file_name(const std::string& tensor) const {
    const Checkpoint::Entry* entry = ckpt_->find(tensor);
    return entry == nullptr ? ckpt_->path() : ckpt_->files()[entry->file].path();
  }

  // The Plan::sources id of checkpoint tensor `tensor` (kMissing: absent), added at its first use,
  // which takes `name` (later uses of the tensor find its name in the PlanSource).
  // Without a checkpoint the source is assumed: `expected_shape`, dtype `assumed`, in no file.
  // `exact`: a tensor kept as stored (codes, zero points, shapes) must have that dtype; else a float.
  uint32_t source_index(std::string& name, uint32_t tensor, const Shape& expected_shape,
                        DType assumed, std::optional<DType> exact = std::nullopt,
                        std::optional<DType> alt = std::nullopt) {
    if (tensor == kMissing && ckpt_ == nullptr) {
      plan_.sources.push_back(
          matrix_view(PlanSource{std::move(name), 0, 0, assumed, expected_shape, 0, 0}));
      return static_cast<uint32_t>(plan_.sources.size() - 1);
    }
    if (tensor == kMissing) {
      throw Error(ErrorKind::kTensorNotFound, "missing from the checkpoint",
                  {.file = ckpt_->path(), .tensor = name, .expected = shape_text(expected_shape)});
    }
    if (source_of_tensor_[tensor] != kMissing) return source_of_tensor_[tensor];
    source_of_tensor_[tensor] = static_cast<uint32_t>(plan_.sources.size());
    const Checkpoint::Entry* entry = entry_of_tensor_[tensor];
    const TensorInfo& info = *entry->info;
    const SafetensorsFile& file = ckpt_->files()[entry->file];
    const bool scalar_as_one = expected_shape.empty() && info.shape == Shape{1};
    if (info.shape != expected_shape && !scalar_as_one) {
      throw Error(ErrorKind::kShapeMismatch, "shape disagrees with config.json",
                  {.file = file.path(), .tensor = name, .field = "shape",
                   .expected = shape_text(expected_shape), .found = shape_text(info.shape)});
    }
    if (exact == DType::kU8 && info.dtype != DType::kU8) {
      throw Error(ErrorKind::kUnsupportedDtype, "codes and scales kept as the checkpoint stores them are bytes",
                  {.file = file.path(), .tensor = name, .field = "dtype", .expected = "U8",
                   .found = std::string(dtype_name(info.dtype))});
    }
    if (exact && info.dtype != *exact && info.dtype != alt) {
      throw Error(ErrorKind::kUnsupportedDtype,
                  format().quantizes()
                      ? fmt::format("an {} checkpoint stores it as {}", quantized_name(), dtype_name(*exact))
                      : fmt::format("bytes kept as the checkpoint stores them must be {}", dtype_name(*exact)),
                  {.file = file.path(), .tensor = name, .field = "dtype",
                   .expected = std::string(dtype_name(*exact)), .found = std::string(dtype_name(info.dtype))});
    }
    if (!exact && (!is_loadable(info.dtype) || !is_convertible_float(info.dtype))) {
      throw Error(ErrorKind::kUnsupportedDtype, "model weights must be a floating-point dtype",
                  {.file = file.path(), .tensor = name, .field = "dtype",
                   .expected = "F16, BF16, F32, F64, F8_E4M3 or F8_E5M2",
                   .found = std::string(dtype_name(info.dtype))});
    }
    plan_.sources.push_back(matrix_view(PlanSource{
        std::move(name), entry->file, file.header().data_start + info.begin, info.dtype, info.shape, 0, 0}));
    return source_of_tensor_[tensor];
  }

  // The source as a matrix: its rows, and every dimension after the first as columns (the header
  // parser, or the config's bounds, keep the product within 64 bits).
  static PlanSource matrix_view(PlanSource source) {
    source.rows = source.shape.empty() ? 1 : source.shape[0];
    const auto col_dims = source.shape.begin() + (source.shape.empty() ? 0 : 1);
    source.cols = std::accumulate(col_dims, source.shape.end(), uint64_t{1}, std::multiplies<>());
    return source;
  }

  // The matrix a stacked or rotary-paired source is read as: a stacked [E, A, ...] source as
  // [E * A, ...] (expert x's rows start at x * A), a rotary-paired [R, C] one as [R / 2, 2 * C]
  // (add_rotary_pairs). The scales of a quantized checkpoint are not laid out for such cuts: refused.
  void set_part_view(const Instance& inst, const Part& part, PlanSource& src) const {
    if (!part.stacked && !part.rotary_pairs && !part.transposed) return;
    if (inst.quantized && !format().quantized_at_load()) {
      throw Error(ErrorKind::kConfig,
                  fmt::format("an {} checkpoint of fused [in, out] experts or rotary-paired projections is not "
                              "supported (its scales would need the same permutation)",
                              quantized_name()),
                  {.tensor = src.name, .field = inst.target, .expected = "a bf16, fp16 or fp32 checkpoint",
                   .found = quantized_name()});
    }
    if (part.stacked && src.shape.size() >= 2) {
      src.expert_rows = src.shape[1];
      src.rows = src.shape[0] * src.shape[1];
      src.cols = std::accumulate(src.shape.begin() + 2, src.shape.end(), uint64_t{1}, std::multiplies<>());
    }
    if (part.rotary_pairs) {
      const uint64_t d = model().head_dim;
      if (src.shape.size() != 2 || d % 2 != 0 || src.shape[0] % d != 0) {
        throw Error(ErrorKind::kShapeMismatch, "rotary pairs need whole heads of an even head_dim",
                    {.tensor = src.name, .field = inst.target,
                     .expected = fmt::format("[heads * {}, hidden] with an even head_dim", d),
                     .found = shape_text(src.shape)});
      }
      src.rows = src.shape[0] / 2;
      src.cols = src.shape[1] * 2;
    }
  }

  // Kept bytes read under another label of the same width (ParamRule::rank_as): copied, never converted.
  static void relabel(PlanSource& src, DType as) {
    if (dtype_bits(src.dtype) != dtype_bits(as)) {
      throw Error(ErrorKind::kUnsupportedDtype, "kept bytes relabelled to a dtype of another width",
                  {.tensor = src.name, .field = "dtype", .expected = fmt::format("{} bits", dtype_bits(as)),
                   .found = std::string(dtype_name(src.dtype))});
    }
    src.dtype = as;
  }

  void require_checkpoint_dtype(const PlanSource& src) const {
    const DType expected = *format().checkpoint_dtype;
    if (src.dtype != expected) {
      throw Error(ErrorKind::kUnsupportedDtype,
                  fmt::format("an {} checkpoint's linear weights must be {}", quantized_name(), dtype_name(expected)),
                  {.file = ckpt_ == nullptr ? std::string() : ckpt_->files()[src.file].path(),
                   .tensor = src.name, .field = "dtype",
                   .expected = std::string(dtype_name(expected)), .found = std::string(dtype_name(src.dtype))});
    }
  }

  const PlanSource& source(uint32_t id) const { return plan_.sources[id]; }

  // The block of a source that one rank takes for a part, by its split rule.
  // `group` ranks split the part; this rank is number `r` among them.
  Block cut(const Part& part, const PlanSource& src, uint64_t group, uint64_t r,
            const std::string& target, bool k_first) const {
    if (part.rows != nullptr) return cut_row_range(part, src, group, r, target, k_first);
    const PartView view = part_view(part, src, target, k_first);
    Block b{0, view.rows, 0, view.cols, view.rows, 1};
    auto must_divide = [&](uint64_t size, uint64_t parts, const char* what) {
      if (size % parts != 0) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{} parts do not divide its {} {}", parts, size, what),
                    {.tensor = src.name, .field = target});
      }
      if ((size / parts) % part.cut_granule != 0) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("a cut of its {} {} in {} parts does not fall on whole {}", size, what, parts,
                                part.cut_granule_name),
                    {.tensor = src.name, .field = target,
                     .expected = fmt::format("{} per rank a multiple of {}", what, part.cut_granule),
                     .found = fmt::format("{} {}", size / parts, what)});
      }
      return size / parts;
    };
    switch (part.split) {
      case Split::kReplicated: return b;
      case Split::kColumn: {
        const uint64_t per = must_divide(view.rows, group, "rows");
        b.row_begin = r * per;
        b.row_end = b.row_begin + per;
        b.out_rows = per;
        return b;
      }
      case Split::kRow: {
        const uint64_t per = must_divide(view.cols, group, "columns");
        b.col_begin = r * per;
        b.col_end = b.col_begin + per;
        return b;
      }
      case Split::kVocab: {
        const uint64_t padded = padded_vocab_rows(view.rows);
        const uint64_t per = must_divide(padded, group, "padded rows");
        b.row_begin = std::min(view.rows, r * per);
        b.row_end = std::min(view.rows, r * per + per);
        b.out_rows = per;
        return b;
      }
      case Split::kKvHeads: {
        const uint64_t heads = part.kv_heads != nullptr ? part.kv_heads(model()) : model().kv_heads;
        const uint64_t head_rows = must_divide(view.rows, heads, "rows over kv heads");
        if (group >= heads) {
          const uint64_t head = r / (group / heads);
          b.row_begin = head * head_rows;
          b.row_end = b.row_begin + head_rows;
        } else {
          const uint64_t per = heads / group * head_rows;
          b.row_begin = r * per;
          b.row_end = b.row_begin + per;
        }
        b.out_rows = b.row_end - b.row_begin;
        return b;
      }
      case Split::kRowBias:
        b.divisor = plan_.parallel.row_bias == RowBias::kDivided ? static_cast<uint32_t>(group) : 1;
        return b;
      case Split::kFirstRank:
        if (r != 0) b.row_end = b.row_begin;  // no piece: the rank's copy stays zero
        return b;
    }
    return b;
  }

  // A part that is rows [begin, begin + size) of its source: whole, or its equal blocks over the group.
  // `k_first`: the source is stored input-major, its rows the view's columns (in words where they pack outputs).
  Block cut_row_range(const Part& part, const PlanSource& src, uint64_t group, uint64_t r,
                      const std::string& target, bool k_first) const {
    arch::RowRange range = part.rows(model());
    const uint64_t src_rows = k_first ? src.cols : src.rows;
    const uint64_t src_cols = k_first ? src.rows : src.cols;
    if (k_first && format().packs_outputs) {
      const uint64_t pack = format().pack_factor;
      if (range.begin % pack != 0 || range.size % pack != 0) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{} words pack {} outputs: a part's rows must be whole words", quantized_name(), pack),
                    {.tensor = src.name, .field = target, .expected = fmt::format("rows a multiple of {}", pack),
                     .found = fmt::format("rows [{}, {})", range.begin, range.begin + range.size)});
      }
      range.begin /= pack;
      range.size /= pack;
    }
    if (range.begin + range.size > src_rows || range.size == 0) {
      throw Error(ErrorKind::kShapeMismatch, "the row range of a part is outside its source",
                  {.tensor = src.name, .field = target,
                   .expected = fmt::format("rows [{}, {})", range.begin, range.begin + range.size),
                   .found = fmt::format("{} rows", src_rows)});
    }
    if (part.split != Split::kReplicated && part.split != Split::kColumn) {
      throw Error(ErrorKind::kInternal, "a row-range part is replicated or split by rows",
                  {.tensor = src.name, .field = target});
    }
    const uint64_t parts = part.split == Split::kColumn ? group : 1;
    if (range.size % parts != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} parts do not divide its {} rows from row {}", parts, range.size, range.begin),
                  {.tensor = src.name, .field = target});
    }
    const uint64_t per = range.size / parts;
    const uint64_t begin = range.begin + (parts == 1 ? 0 : r * per);
    return Block{begin, begin + per, 0, src_cols, per, 1};
  }

  // The layout of one slot: the block of each part, stacked along the rows of a rows x cols tensor.
  struct SlotLayout {
    std::vector<Block> blocks;
    uint64_t rows = 0;
    uint64_t cols = 0;
  };

  // Cuts every part of the instance's first source row for one rank; fused parts must be equally
  // wide.
  SlotLayout slot_layout(const Instance& inst, SplitGroup group,
                         std::vector<uint64_t>* part_rows) const {
    const ParamRule& rule = *inst.rule;
    const std::vector<uint32_t>& first_ids = inst.source_ids.front();
    SlotLayout layout;
    for (size_t k = 0; k < rule.parts.size(); ++k) {
      const Block b = cut(rule.parts[k], source(first_ids[k]), group.size, group.index, inst.target, k_first(inst));
      const uint64_t block_cols = b.col_end - b.col_begin;
      if (k > 0 && block_cols != layout.cols) {
        throw Error(ErrorKind::kShapeMismatch, "fused parts have different widths",
                    {.tensor = source(first_ids[k]).name,
                     .field = inst.target,
                     .expected = std::to_string(layout.cols),
                     .found = std::to_string(block_cols)});
      }
      layout.cols = block_cols;
      layout.rows += b.out_rows;
      layout.blocks.push_back(b);
      if (part_rows != nullptr) part_rows->push_back(b.out_rows);
    }
    return layout;
  }

  // The pieces that fill one slot of logical expert `expert` (0 for a non-expert parameter),
  // starting `base` bytes into the parameter, from sources `ids`. A block is in the part's view
  // (part_view); here it becomes source rows and columns.
  void add_slot(PlanParam& param, const Instance& inst, const SlotLayout& layout,
                const std::vector<uint32_t>& ids, size_t expert, uint64_t base, uint64_t esize) const {
    uint64_t row = 0;
    for (size_t k = 0; k < layout.blocks.size(); ++k) {
      const Block& b = layout.blocks[k];
      const Part& part = inst.rule->parts[k];
      const uint64_t dst = base + row * layout.cols * esize;
      if (b.row_end - b.row_begin < b.out_rows) param.has_padding = true;
      row += b.out_rows;
      if (b.row_end == b.row_begin) continue;
      const PartView view = part_view(part, source(ids[k]), inst.target, k_first(inst));
      const uint64_t first = part.stacked ? expert * view.expert_rows : 0;  // the expert's matrix
      const uint64_t rows_begin = view.band_row + b.row_begin;
      const uint64_t rows_end = view.band_row + b.row_end;
      if (k_first(inst)) {  // source rows are view columns: the block lands as columns of the [K, N] slot
        PlanPiece piece{ids[k], b.col_begin, b.col_end, rows_begin, rows_end,
                        base + (row - b.out_rows) * esize, b.divisor};
        piece.dst_pitch = layout.rows;
        param.pieces.push_back(piece);
      } else if (part.transposed) {  // view rows are source columns, view columns source rows
        param.pieces.push_back({ids[k], first + b.col_begin, first + b.col_end, rows_begin, rows_end,
                                dst, b.divisor, /*transposed=*/true});
      } else if (part.rotary_pairs) {
        add_rotary_pairs(param, ids[k], rows_begin, rows_end, view.cols, dst, layout.cols * esize,
                         inst.target);
      } else {
        param.pieces.push_back({ids[k], first + rows_begin, first + rows_end, b.col_begin, b.col_end,
                                dst, b.divisor});
      }
    }
  }

  // Rows [begin, end) (whole heads) of a part in rotary pairs, whose source is viewed as
  // [rows / 2, 2 * cols] (one view row = an even row and the odd row after it): per head, the view's
  // left halves (the even rows) then its right halves (the odd rows), each one piece.
  void add_rotary_pairs(PlanParam& param, uint32_t id, uint64_t begin, uint64_t end, uint64_t cols,
                        uint64_t dst, uint64_t row_bytes, const std::string& target) const {
    const uint64_t d = model().head_dim;
    if (begin % d != 0 || end % d != 0) {
      throw Error(ErrorKind::kInvalidArgument, "a rotary-paired projection must be cut on whole heads",
                  {.tensor = source(id).name, .field = target,
                   .expected = fmt::format("multiples of head_dim {}", d),
                   .found = fmt::format("rows [{}, {})", begin, end)});
    }
    for (uint64_t head = begin; head < end; head += d) {
      const uint64_t at = dst + (head - begin) * row_bytes;
      param.pieces.push_back({id, head / 2, (head + d) / 2, 0, cols, at, 1});
      param.pieces.push_back({id, head / 2, (head + d) / 2, cols, 2 * cols, at + d / 2 * row_bytes, 1});
    }
  }

  // Fills the parameter's slots and sets its shape: one slot per local expert of this rank's
  // expert-parallel group ([slots, rows, cols]), or the one slot of any other parameter. Returns
  // the logical expert (source row of inst.sources) of each slot.
  std::vector<size_t> place_slots(const Instance& inst, int rank, const SlotLayout& layout,
                                  uint64_t esize, PlanParam& param) const {
    const ParamRule& rule = *inst.rule;
    std::vector<size_t> slot_logical;
    if (rule.group == Group::kExperts) {
      const uint64_t local = static_cast<uint64_t>(plan_.physical_experts / plan_.parallel.ep);
      const uint64_t ep_rank = static_cast<uint64_t>(rank / plan_.moe_tp);
      const uint64_t slot_bytes = layout.rows * layout.cols * esize;
      const std::vector<int>& map = plan_.physical_to_logical[static_cast<size_t>(inst.moe_layer)];
      for (uint64_t j = 0; j < local; ++j) {
        const size_t expert = static_cast<size_t>(map[ep_rank * local + j]);
        slot_logical.push_back(expert);
        add_slot(param, inst, layout, inst.source_ids[expert], expert, j * slot_bytes, esize);
      }
      // A stacked [E, n] source (gpt-oss's expert biases) is a vector per expert.
      const Part& part = rule.parts.front();
      const bool vectors = part.stacked && source(inst.source_ids.front()[0]).shape.size() == 2;
      param.shape = vectors ? Shape{local, layout.rows} : Shape{local, layout.rows, layout.cols};
      return slot_logical;
    }
    slot_logical.push_back(0);
    add_slot(param, inst, layout, inst.source_ids.front(), 0, 0, esize);
    const Shape& first_shape = source(inst.source_ids.front()[0]).shape;
    const bool vector = first_shape.size() <= 1;
    param.shape = vector ? Shape{layout.rows} : Shape{layout.rows, layout.cols};
    // A 3-D source cut by rows keeps its trailing dimensions (a conv1d weight [C, 1, K]).
    if (first_shape.size() > 2 && layout.cols == source(inst.source_ids.front()[0]).cols) {
      param.shape = Shape{layout.rows};
      param.shape.insert(param.shape.end(), first_shape.begin() + 1, first_shape.end());
    }
    if (rule.flatten) param.shape = {layout.rows * layout.cols};
    return slot_logical;
  }

  // A float32 tensor that post-processing fills or reads (a scale, a scale table, a float32 twin).
  static PlanParam float_param(std::string name, uint32_t module, ParamRole role, Shape shape) {
    PlanParam extra;
    extra.name = std::move(name);
    extra.module = module;
    extra.role = role;
    extra.dtype = DType::kF32;
    extra.shape = std::move(shape);
    extra.nbytes = shape_nbytes(extra.shape, extra.dtype);
    return extra;
  }

  // A merged per-slot value: [1] for a dense layer, [El] per expert, or, where the companion keeps a
  // column per part, [El, 2] for w13 (both columns equal, the shape the engines keep so that the next
  // reload fits).
  static Shape merged_shape(const CompanionTensor& companion, bool expert, uint64_t slots, uint64_t parts) {
    if (!expert) return Shape{1};
    return companion.merged_keeps_parts && parts == 2 ? Shape{slots, 2} : Shape{slots};
  }

  // Per-part scalars: each part's value lands in a [slots, parts] table.
  static PlanParam scale_table(const std::vector<std::vector<uint32_t>>& ids,
                               const std::vector<size_t>& slot_logical, uint64_t parts,
                               std::string name, uint32_t module, ParamRole role) {
    const uint64_t slots = slot_logical.size();
    PlanParam table = float_param(std::move(name), module, role, Shape{slots, parts});
    for (uint64_t j = 0; j < slots; ++j) {
      for (uint64_t k = 0; k < parts; ++k) {
        table.pieces.push_back({ids[slot_logical[j]][k], 0, 1, 0, 1, (j * parts + k) * 4, 1});
      }
    }
    return table;
  }

  // The rank tensors of one rule instance: its parameter and, for a quantized linear layer, the
  // format's companions (and the internal tensors post-processing reads), all in module `module`.
  std::vector<PlanParam> plan_params(const Instance& inst, int rank, uint32_t module,
                                     std::vector<uint64_t>* part_rows) const {
    const ParamRule& rule = *inst.rule;
    const bool at_load = inst.quantized && format().quantized_at_load();
    PlanParam param;
    param.name = inst.quantized ? with_suffix(inst.target, format().weight_suffix) : inst.target;
    param.module = module;
    param.dtype = inst.quantized                   ? format().rank_dtype
                  : rule.keep == Keep::kFloat32    ? DType::kF32
                  : rule.keep == Keep::kCheckpoint ? source(inst.source_ids.front()[0]).dtype
                                                   : plan_.dtype;
    // Quantized at load: the checkpoint is read into a float32 twin that post-processing quantizes.
    const uint64_t esize = dtype_bits(at_load ? DType::kF32 : param.dtype) / 8;
    const SlotLayout layout = slot_layout(inst, plan_.parallel.split_group(rule.group, rank), part_rows);
    const std::vector<size_t> slot_logical = place_slots(inst, rank, layout, esize, param);
    if (k_first(inst)) std::swap(param.shape[param.shape.size() - 2], param.shape.back());  // [.., K, N]
    param.nbytes = shape_nbytes(param.shape, param.dtype);

    std::vector<PlanParam> out;
    if (!inst.quantized) {
      out.push_back(std::move(param));
      return out;
    }
    std::optional<PlanParam> twin;
    if (at_load) {
      twin = float_param(with_suffix(inst.target, "weight_f32"), module, ParamRole::kDynamicSource, param.shape);
      twin->pieces = std::move(param.pieces);
      param.pieces.clear();
    }
    out.push_back(std::move(param));
    const bool expert = rule.group == Group::kExperts;
    const uint64_t slots = slot_logical.size();
    const uint64_t parts = layout.blocks.size();
    for (size_t c = 0; c < format().companions.size(); ++c) {
      const CompanionTensor& companion = format().companions[c];
      const std::string name = with_suffix(inst.target, companion.rank_suffix);
      switch (companion.layout) {
        case CompanionLayout::kBlockGrid:
          out.push_back(block_grid_param(inst, c, layout.blocks, slot_logical, expert, module));
          break;
        case CompanionLayout::kPartScalar:
          out.push_back(float_param(name, module, companion.role, merged_shape(companion, expert, slots, parts)));
          out.push_back(scale_table(inst.companion_ids[c], slot_logical, parts,
                                    with_suffix(inst.target, companion.parts_suffix), module, companion.parts_role));
          break;
        case CompanionLayout::kMadeAtLoad:
          out.push_back(float_param(name, module, companion.role, merged_shape(companion, expert, slots, parts)));
          break;
        case CompanionLayout::kWholeLastNamed:
          out.push_back(last_part_param(inst, c, slot_logical, expert, module));
          break;
        case CompanionLayout::kPartTable: {
          // The [slots, parts] table's bytes, under the engines' shape; every logical expert's in order where
          // the engine indexes it by expert (every_expert).
          std::vector<size_t> every(expert && companion.every_expert ? inst.companion_ids[c].size() : 0);
          for (size_t e = 0; e < every.size(); ++e) every[e] = e;
          const std::vector<size_t>& rows = every.empty() ? slot_logical : every;
          PlanParam table = scale_table(inst.companion_ids[c], rows, parts, name, module, companion.role);
          table.shape = !expert ? Shape{parts} : parts == 1 ? Shape{rows.size()} : Shape{rows.size(), parts};
          out.push_back(std::move(table));
          break;
        }
      }
    }
    if (twin) out.push_back(std::move(*twin));
    return out;
  }

  // Companion `c` kept whole from the part an engine reads last, one per slot of routed experts: files
  // in name order, each file's tensors in name order (vLLM's safetensors iterator).
  PlanParam last_part_param(const Instance& inst, size_t c, const std::vector<size_t>& slot_logical, bool expert,
                            uint32_t module) const {
    const CompanionTensor& companion = format().companions[c];
    const auto read_before = [&](uint32_t a, uint32_t b) {
      const PlanSource& x = source(a);
      const PlanSource& y = source(b);
      if (ckpt_ != nullptr && x.file != y.file) return ckpt_->files()[x.file].path() < ckpt_->files()[y.file].path();
      return x.name < y.name;
    };
    const auto last_named = [&](size_t logical) {
      const std::vector<uint32_t>& ids = inst.companion_ids[c][logical];
      return *std::max_element(ids.begin(), ids.end(), read_before);
    };
    PlanParam whole;
    whole.name = with_suffix(inst.target, companion.rank_suffix);
    whole.module = module;
    whole.role = companion.role;
    whole.dtype = companion_dtype(companion, expert);
    const PlanSource& first = source(last_named(slot_logical.front()));
    const uint64_t elements = first.rows * first.cols;
    whole.shape = first.shape;
    if (expert) whole.shape.insert(whole.shape.begin(), slot_logical.size());
    whole.nbytes = shape_nbytes(whole.shape, whole.dtype);
    const uint64_t esize = dtype_bits(whole.dtype) / 8;
    for (uint64_t j = 0; j < slot_logical.size(); ++j) {
      const uint32_t id = last_named(slot_logical[j]);
      whole.pieces.push_back({id, 0, source(id).rows, 0, source(id).cols, j * elements * esize, 1});
    }
    return whole;
  }

  // A block grid (companion `c`) is cut with its weight, block rows for row cuts and block columns for
  // column cuts, per part; a cut inside a block would mix two ranks' values, so it is an error. Packed
  // codes' columns are words: their values are pack_factor times as many.
  PlanParam block_grid_param(const Instance& inst, size_t c, const std::vector<Block>& blocks,
                             const std::vector<size_t>& slot_logical, bool expert, uint32_t module) const {
    const CompanionTensor& companion = format().companions[c];
    const uint64_t br = grid_block_rows(companion);
    const uint64_t bc = grid_block_cols(companion);
    // Values a block's row or column of the weight's view stands for: words pack K (columns) or N (rows).
    const uint64_t row_pack = format().packs_outputs ? format().pack_factor : 1;
    const uint64_t pack = format().packs_outputs ? 1 : format().pack_factor;
    const ParamGroup group = inst.rule->group;
    const uint64_t ranks = plan_.parallel.split_group(group, 0).size;
    auto check = [&](uint64_t begin, uint64_t end, uint64_t full, uint64_t block, const std::string& part,
                     const char* dim) {
      if (begin == 0 && end == full) return;
      if (block == kWholeRow) return;  // one column for the whole row, never cut
      if (begin % block != 0 || (end % block != 0 && end != full)) {
        const std::string blocks = format().block_name == "blocks"
                                       ? fmt::format("the {}-wide {} blocks", block, quantized_name())
                                       : fmt::format("whole {} {}", quantized_name(), format().block_name);
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("the tensor-parallel cut [{}, {}) of its {} {} does not fall on {} (group {}, "
                                "split over {} ranks)",
                                begin, end, full, dim, blocks, group_name(group), ranks),
                    {.tensor = part, .field = inst.target,
                     .expected = fmt::format("a multiple of {}", block),
                     .found = fmt::format("{} {} per rank", end - begin, dim)});
      }
    };
    uint64_t grid_rows = 0;
    uint64_t grid_cols = 0;
    std::vector<uint64_t> part_row0;
    const bool input_major = k_first(inst);
    for (size_t k = 0; k < blocks.size(); ++k) {
      const Block& b = blocks[k];
      const PlanSource& src = source(inst.source_ids.front()[k]);
      const uint64_t rows = input_major ? src.cols : src.rows;  // of the [N, K] view
      const uint64_t cols = input_major ? src.rows : src.cols;
      check(b.row_begin * row_pack, b.row_end * row_pack, rows * row_pack, br, src.name, "rows");
      check(b.col_begin * pack, b.col_end * pack, cols * pack, bc, src.name, "columns");
      part_row0.push_back(grid_rows);
      grid_rows += ceil_div(b.out_rows * row_pack, br);
      grid_cols = ceil_div((b.col_end - b.col_begin) * pack, bc);
    }
    PlanParam grid;
    grid.name = with_suffix(inst.target, companion.rank_suffix);
    grid.module = module;
    grid.role = companion.role;
    grid.dtype = companion_dtype(companion, expert);
    const uint64_t esize = dtype_bits(grid.dtype) / 8;
    const uint64_t slots = slot_logical.size();
    grid.shape = expert ? Shape{slots, grid_rows, grid_cols} : Shape{grid_rows, grid_cols};
    if (input_major) std::swap(grid.shape[grid.shape.size() - 2], grid.shape.back());  // [.., K blocks, N blocks]
    grid.nbytes = shape_nbytes(grid.shape, grid.dtype);
    const uint64_t slot_bytes = grid_rows * grid_cols * esize;
    for (uint64_t j = 0; j < slots; ++j) {
      for (size_t k = 0; k < blocks.size(); ++k) {
        const Block& b = blocks[k];
        const uint32_t id = inst.companion_ids[c][slot_logical[j]][k];
        const uint64_t n_begin = b.row_begin * row_pack / br;
        const uint64_t n_end = ceil_div(b.row_end * row_pack, br);
        const uint64_t k_begin = b.col_begin * pack / bc;
        const uint64_t k_end = ceil_div(b.col_end * pack, bc);
        if (input_major) {  // the part's block grid is a column block of the [K blocks, N blocks] slot
          PlanPiece piece{id, k_begin, k_end, n_begin, n_end, j * slot_bytes + part_row0[k] * esize, 1};
          piece.dst_pitch = grid_rows;
          grid.pieces.push_back(piece);
        } else {
          grid.pieces.push_back({id, n_begin, n_end, k_begin, k_end, j * slot_bytes + part_row0[k] * grid_cols * esize, 1});
        }
      }
    }
    return grid;
  }

  RankPlan plan_rank(int rank) {
    RankPlan out;
    out.rank = rank;
    out.ep_rank = rank / plan_.moe_tp;
    out.moe_tp_rank = rank % plan_.moe_tp;
    out.dp_rank = plan_.parallel.dp_rank(rank);
    out.attention_rank = plan_.parallel.attention_rank(rank);
    uint64_t offset = 0;
    for (size_t i = 0; i < instances_.size(); ++i) {
      std::vector<uint64_t>* part_rows = rank == 0 ? &plan_.modules[i].part_rows : nullptr;
      for (PlanParam& param : plan_params(instances_[i], rank, static_cast<uint32_t>(i), part_rows)) {
        param.offset = offset;
        offset += (param.nbytes + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
        for (const PlanPiece& piece : param.pieces) {
          out.read_bytes += piece.rows() * piece.cols() * dtype_bits(plan_.sources[piece.source].dtype) / 8;
        }
        out.params.push_back(std::move(param));
      }
    }
    out.bytes = offset;
    return out;
  }

  // One module per rule instance; its post-processing follows from the weight format.
  void plan_modules() {
    for (const Instance& inst : instances_) {
      PlanModule module{inst.target,
                        PostProcess::kNone,
                        {},
                        inst.rule->group == Group::kExperts ? inst.moe_layer : -1,
                        inst.rule->group};
      if (inst.quantized) {
        module.post = format().post;
        module.checks_scales = format().checks_scales;
      }
      plan_.modules.push_back(std::move(module));
    }
  }

  const Checkpoint* ckpt_ = nullptr;  // null: plan_from_config
  std::function<bool(std::string_view)> optional_present_;  // plan_from_config's
  Plan plan_;
  std::vector<Instance> instances_;
  // Checkpoint tensor (position in tensor_names()) -> Plan::sources id, kMissing until used.
  std::vector<uint32_t> source_of_tensor_;
  std::vector<const Checkpoint::Entry*> entry_of_tensor_;  // by position in tensor_names()
};

}  // namespace

Plan make_plan(const Checkpoint& checkpoint, const ParallelConfig& parallel) {
  return Planner(checkpoint, parallel).run();
}

Plan plan_from_config(const nlohmann::json& config, const ParallelConfig& parallel,
                      const std::function<bool(std::string_view)>& optional_present) {
  return Planner(config, parallel, optional_present).run();
}

}  // namespace shardload
