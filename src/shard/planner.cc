// Turns a checkpoint, its architecture table and a layout into per-rank block copies.
#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "model/arch_table.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

using arch::Group;
using arch::Keep;
using arch::ParamRule;
using arch::Part;
using arch::Split;
using arch::When;

std::string shape_text(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
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
  }
  return false;
}

// One applicable rule, for one layer (or the model), with its source names resolved.
struct Instance {
  const ParamRule* rule = nullptr;
  int layer = -1;      // -1: a model-level parameter
  int moe_layer = -1;  // row of physical_to_logical for expert parameters
  std::string target;
  // sources[x][k]: part k for logical expert x (one row for non-expert parameters).
  std::vector<std::vector<std::string>> sources;
};

struct Block {
  uint64_t row_begin, row_end, col_begin, col_end;
  uint64_t out_rows;  // rows the part takes in the rank tensor (> row_end - row_begin when padded)
  uint32_t divisor;
};

class Planner {
 public:
  Planner(const Checkpoint& ckpt, const ParallelConfig& parallel) : ckpt_(ckpt) {
    if (!ckpt.has_config()) {
      throw Error(ErrorKind::kConfig, "a model directory with config.json is needed",
                  {.file = ckpt.path()});
    }
    plan_.model = ModelConfig::from_json(ckpt.config());
    if (ckpt.config().contains("quantization_config")) {
      throw Error(ErrorKind::kConfig, "quantized checkpoints are not supported yet",
                  {.file = "config.json", .field = "quantization_config"});
    }
    plan_.parallel = parallel;
    validate_layout(plan_.model, parallel);
    plan_.moe_tp = parallel.tp / parallel.ep;
    plan_.dtype = parallel.dtype.value_or(plan_.model.dtype);
    build_expert_map();
  }

  Plan run() {
    instantiate();
    check_consumed();
    for (int r = 0; r < plan_.parallel.tp; ++r) plan_.ranks.push_back(plan_rank(r));
    return std::move(plan_);
  }

 private:
  const ModelConfig& model() const { return plan_.model; }

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

  void add_instance(const ParamRule& rule, int layer, int moe_layer, const std::string& prefix) {
    Instance inst{&rule, layer, moe_layer, prefix + rule.target, {}};
    const size_t experts = rule.group == Group::kExpert ? model().experts : 1;
    for (size_t x = 0; x < experts; ++x) {
      std::vector<std::string>& names = inst.sources.emplace_back();
      for (const Part& part : rule.parts) {
        names.push_back(prefix + replace_all(part.source, "{E}", std::to_string(x)));
      }
    }
    if (rule.optional) {
      for (const auto& names : inst.sources) {
        for (const std::string& name : names) {
          if (ckpt_.find(name) == nullptr) return;  // absent optional parameter: not exported
        }
      }
    }
    instances_.push_back(std::move(inst));
  }

  void instantiate() {
    const arch::ArchTable& table = arch::table_for(model().family);
    for (const ParamRule& rule : table.model) {
      if (applies(rule.when, model(), -1)) add_instance(rule, -1, -1, "");
    }
    int moe_index = 0;
    for (int layer = 0; layer < model().layers; ++layer) {
      const std::string prefix = fmt::format("model.layers.{}.", layer);
      const bool moe_layer = model().moe_layer[static_cast<size_t>(layer)];
      for (const ParamRule& rule : table.layer) {
        if (applies(rule.when, model(), layer)) {
          add_instance(rule, layer, moe_layer ? moe_index : -1, prefix);
        }
      }
      if (moe_layer) ++moe_index;
    }
  }

  // Every checkpoint tensor is consumed by a parameter or skipped by a stated rule; every source exists
  // with the shape config.json implies and a dtype shardload can convert.
  void check_consumed() {
    std::unordered_map<std::string, Shape> expected;
    for (const Instance& inst : instances_) {
      for (const auto& names : inst.sources) {
        for (size_t k = 0; k < names.size(); ++k) {
          expected.emplace(names[k], inst.rule->parts[k].shape(model()));
        }
      }
    }
    const arch::ArchTable& table = arch::table_for(model().family);
    for (const std::string& name : ckpt_.tensor_names()) {
      if (expected.contains(name)) continue;
      const auto skip = std::find_if(table.skips.begin(), table.skips.end(),
                                     [&](const arch::SkipRule& s) { return s.matches(name, model()); });
      if (skip == table.skips.end()) {
        throw Error(ErrorKind::kUnknownTensor,
                    fmt::format("no rule of {} consumes or skips it", model().architecture),
                    {.file = file_name(name), .tensor = name});
      }
      plan_.skipped.push_back(name);
    }
    // In table order, so that the first missing tensor reported is the first a reader would look for.
    for (const Instance& inst : instances_) {
      for (const auto& names : inst.sources) {
        for (const std::string& name : names) source_index(name, expected.at(name));
      }
    }
  }

  std::string file_name(const std::string& tensor) const {
    const Checkpoint::Entry* entry = ckpt_.find(tensor);
    return entry == nullptr ? ckpt_.path() : ckpt_.files()[entry->file].path();
  }

  uint32_t source_index(const std::string& name, const Shape& expected_shape) {
    auto [it, inserted] = source_ids_.emplace(name, static_cast<uint32_t>(plan_.sources.size()));
    if (!inserted) return it->second;
    const Checkpoint::Entry* entry = ckpt_.find(name);
    if (entry == nullptr) {
      throw Error(ErrorKind::kTensorNotFound, "missing from the checkpoint",
                  {.file = ckpt_.path(), .tensor = name, .expected = shape_text(expected_shape)});
    }
    const TensorInfo& info = *entry->info;
    const SafetensorsFile& file = ckpt_.files()[entry->file];
    if (info.shape != expected_shape) {
      throw Error(ErrorKind::kShapeMismatch, "shape disagrees with config.json",
                  {.file = file.path(), .tensor = name, .field = "shape",
                   .expected = shape_text(expected_shape), .found = shape_text(info.shape)});
    }
    if (!is_loadable(info.dtype) || !is_convertible_float(info.dtype)) {
      throw Error(ErrorKind::kUnsupportedDtype, "model weights must be a floating-point dtype",
                  {.file = file.path(), .tensor = name, .field = "dtype",
                   .expected = "F16, BF16, F32, F64, F8_E4M3 or F8_E5M2",
                   .found = std::string(dtype_name(info.dtype))});
    }
    PlanSource source{name, entry->file, file.header().data_start + info.begin, info.dtype,
                      info.shape, 0, 0};
    source.rows = info.shape.empty() ? 1 : info.shape[0];
    source.cols = info.shape.size() <= 1 ? 1 : shape_numel(Shape(info.shape.begin() + 1, info.shape.end()));
    plan_.sources.push_back(std::move(source));
    return it->second;
  }

  const PlanSource& source(const std::string& name) const {
    return plan_.sources[source_ids_.at(name)];
  }

  // The block of a source that one rank takes for a part, by its split rule.
  Block cut(const Part& part, const PlanSource& src, uint64_t group, uint64_t rank,
            const std::string& target) const {
    const uint64_t tp = static_cast<uint64_t>(plan_.parallel.tp);
    const uint64_t r = rank;
    Block b{0, src.rows, 0, src.cols, src.rows, 1};
    auto must_divide = [&](uint64_t size, uint64_t parts, const char* what) {
      if (size % parts != 0) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{} parts do not divide its {} {}", parts, size, what),
                    {.tensor = src.name, .field = target});
      }
      return size / parts;
    };
    switch (part.split) {
      case Split::kReplicated: return b;
      case Split::kColumn: {
        const uint64_t per = must_divide(src.rows, group, "rows");
        b.row_begin = r * per;
        b.row_end = b.row_begin + per;
        b.out_rows = per;
        return b;
      }
      case Split::kRow: {
        const uint64_t per = must_divide(src.cols, group, "columns");
        b.col_begin = r * per;
        b.col_end = b.col_begin + per;
        return b;
      }
      case Split::kVocab: {
        const uint64_t padded = (src.rows + 63) / 64 * 64;
        const uint64_t per = must_divide(padded, tp, "padded rows");
        b.row_begin = std::min(src.rows, r * per);
        b.row_end = std::min(src.rows, r * per + per);
        b.out_rows = per;
        return b;
      }
      case Split::kKvHeads: {
        const uint64_t heads = model().kv_heads;
        const uint64_t head_rows = must_divide(src.rows, heads, "rows over kv heads");
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
        b.divisor = plan_.parallel.row_bias == RowBias::kDivided ? static_cast<uint32_t>(tp) : 1;
        return b;
    }
    return b;
  }

  PlanParam plan_param(const Instance& inst, int rank) const {
    const ParamRule& rule = *inst.rule;
    const ParallelConfig& p = plan_.parallel;
    uint64_t group = static_cast<uint64_t>(p.tp);
    uint64_t group_rank = static_cast<uint64_t>(rank);
    if (rule.group == Group::kExpert) {
      group = static_cast<uint64_t>(plan_.moe_tp);
      group_rank = static_cast<uint64_t>(rank % plan_.moe_tp);
    } else if (rule.group == Group::kSharedExpert && !p.split_shared_experts) {
      group = 1;
      group_rank = 0;
    }
    PlanParam param;
    param.name = inst.target;
    param.dtype = rule.keep == Keep::kFloat32 ? DType::kF32 : plan_.dtype;
    const uint64_t esize = dtype_bits(param.dtype) / 8;

    // The layout of one slot: parts stacked along the rows.
    std::vector<Block> blocks;
    uint64_t rows = 0;
    uint64_t cols = 0;
    const std::vector<std::string>& first = inst.sources.front();
    for (size_t k = 0; k < rule.parts.size(); ++k) {
      const Block b = cut(rule.parts[k], source(first[k]), group, group_rank, inst.target);
      const uint64_t block_cols = b.col_end - b.col_begin;
      if (k > 0 && block_cols != cols) {
        throw Error(ErrorKind::kShapeMismatch, "fused parts have different widths",
                    {.tensor = first[k], .field = inst.target, .expected = std::to_string(cols),
                     .found = std::to_string(block_cols)});
      }
      cols = block_cols;
      rows += b.out_rows;
      blocks.push_back(b);
    }
    const uint64_t slot_bytes = rows * cols * esize;
    const bool vector = source(first[0]).shape.size() <= 1;

    auto add_slot = [&](const std::vector<std::string>& names, uint64_t base) {
      uint64_t row = 0;
      for (size_t k = 0; k < blocks.size(); ++k) {
        const Block& b = blocks[k];
        if (b.row_end > b.row_begin) {
          param.pieces.push_back({source_ids_.at(names[k]), b.row_begin, b.row_end, b.col_begin,
                                  b.col_end, base + row * cols * esize, b.divisor});
        }
        if (b.row_end - b.row_begin < b.out_rows) param.has_padding = true;
        row += b.out_rows;
      }
    };

    if (rule.group == Group::kExpert) {
      const uint64_t local = static_cast<uint64_t>(plan_.physical_experts / p.ep);
      const uint64_t ep_rank = static_cast<uint64_t>(rank / plan_.moe_tp);
      const std::vector<int>& map = plan_.physical_to_logical[static_cast<size_t>(inst.moe_layer)];
      for (uint64_t j = 0; j < local; ++j) {
        const int logical = map[ep_rank * local + j];
        add_slot(inst.sources[static_cast<size_t>(logical)], j * slot_bytes);
      }
      param.shape = {local, rows, cols};
    } else {
      add_slot(first, 0);
      param.shape = vector ? Shape{rows} : Shape{rows, cols};
      if (rule.flatten) param.shape = {rows * cols};
    }
    param.nbytes = shape_nbytes(param.shape, param.dtype);
    return param;
  }

  RankPlan plan_rank(int rank) const {
    RankPlan out;
    out.rank = rank;
    out.ep_rank = rank / plan_.moe_tp;
    out.moe_tp_rank = rank % plan_.moe_tp;
    uint64_t offset = 0;
    for (const Instance& inst : instances_) {
      PlanParam param = plan_param(inst, rank);
      param.offset = offset;
      offset += (param.nbytes + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
      for (const PlanPiece& piece : param.pieces) {
        out.read_bytes += piece.rows() * piece.cols() * dtype_bits(plan_.sources[piece.source].dtype) / 8;
      }
      out.params.push_back(std::move(param));
    }
    out.bytes = offset;
    return out;
  }

  const Checkpoint& ckpt_;
  Plan plan_;
  std::vector<Instance> instances_;
  std::unordered_map<std::string, uint32_t> source_ids_;
};

}  // namespace

Plan make_plan(const Checkpoint& checkpoint, const ParallelConfig& parallel) {
  return Planner(checkpoint, parallel).run();
}

}  // namespace shardload
