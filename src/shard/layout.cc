// Layout checks that run before any I/O, with the messages a user of vLLM or SGLang expects.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "core/json_input.h"
#include "shardload/error.h"
#include "shard/vocab_padding.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

[[noreturn]] void invalid(std::string message) {
  throw Error(ErrorKind::kInvalidArgument, std::move(message));
}

}  // namespace

std::vector<std::vector<int>> read_expert_map(const std::string& path) {
  return parse_expert_map_text(
      read_bounded_file(path, ErrorKind::kInvalidArgument, kDataJsonLimits.max_bytes, "expert map"),
      path);
}

std::vector<std::vector<int>> parse_expert_map_text(std::string_view text,
                                                    const std::string& source) {
  const nlohmann::json parsed =
      parse_json(text, ErrorKind::kInvalidArgument, source, kDataJsonLimits);
  const auto it = parsed.is_object() ? parsed.find("physical_to_logical_map") : parsed.end();
  if (it == parsed.end()) {
    throw Error(ErrorKind::kInvalidArgument, "no physical_to_logical_map list",
                {.file = source, .field = "physical_to_logical_map", .expected = "[[...], ...]"});
  }
  return parse_expert_map(*it, source);
}

std::vector<std::vector<int>> parse_expert_map(const nlohmann::json& rows,
                                               const std::string& file) {
  if (!rows.is_array()) {
    throw Error(ErrorKind::kInvalidArgument, "no physical_to_logical_map list",
                {.file = file, .field = "physical_to_logical_map", .expected = "[[...], ...]"});
  }
  std::vector<std::vector<int>> map;
  for (const nlohmann::json& row : rows) {
    if (!row.is_array()) {
      throw Error(ErrorKind::kInvalidArgument, "a row is not a list",
                  {.file = file, .field = "physical_to_logical_map", .found = brief_json(row)});
    }
    std::vector<int>& out = map.emplace_back();
    for (const nlohmann::json& v : row) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 30)) {
        throw Error(ErrorKind::kInvalidArgument, "an entry is not an expert index",
                    {.file = file,
                     .field = "physical_to_logical_map",
                     .expected = "a logical expert number from 0",
                     .found = brief_json(v)});
      }
      out.push_back(v.get<int>());
    }
  }
  return map;
}

uint64_t validate_expert_map(const ModelConfig& m, const std::vector<std::vector<int>>& map,
                             std::optional<int> redundant_experts) {
  const size_t layers = static_cast<size_t>(m.moe_layer_count());
  if (map.size() != layers) {
    invalid(fmt::format("the expert map has {} rows for {} MoE layers", map.size(), layers));
  }
  if (map.empty()) invalid("the model has no MoE layers for an expert map");
  const uint64_t physical = map.front().size();
  if (physical < m.experts) {
    invalid(fmt::format("the expert map has {} physical experts, fewer than {} logical", physical,
                        m.experts));
  }
  if (redundant_experts && static_cast<uint64_t>(*redundant_experts) != physical - m.experts) {
    invalid(
        fmt::format("--redundant-experts {} disagrees with the expert map ({} physical - {} "
                    "logical = {})",
                    *redundant_experts, physical, m.experts, physical - m.experts));
  }
  for (size_t layer = 0; layer < map.size(); ++layer) {
    const std::vector<int>& row = map[layer];
    if (row.size() != physical) {
      invalid(fmt::format("expert map row {} has {} entries, expected {}", layer, row.size(),
                          physical));
    }
    std::set<int> seen;
    for (int logical : row) {
      if (logical < 0 || static_cast<uint64_t>(logical) >= m.experts) {
        invalid(fmt::format("expert map row {} names expert {}, but the model has {} experts",
                            layer, logical, m.experts));
      }
      seen.insert(logical);
    }
    if (seen.size() != m.experts) {
      invalid(fmt::format("expert map row {} places {} of {} logical experts", layer, seen.size(),
                          m.experts));
    }
  }
  return physical;
}

namespace {

// How a message names the ranks that split `group`: "tp=8" for the world, "attention tp=4 (tp=8 / dp=2)"
// for the attention group.
std::string split_text(const ParallelConfig& p, ParamGroup group) {
  if (p.scope(group) == Scope::kAttention) {
    return fmt::format("attention tp={} (tp={} / dp={})", p.attention_tp(), p.tp, p.dp);
  }
  return fmt::format("tp={}", p.tp);
}

void validate_sizes(const ParallelConfig& p) {
  if (p.tp < 1) invalid(fmt::format("tp={} must be at least 1", p.tp));
  if (p.ep < 1) invalid(fmt::format("ep={} must be at least 1", p.ep));
  if (p.dp < 1) invalid(fmt::format("dp={} must be at least 1", p.dp));
  if (p.tp % p.ep != 0) invalid(fmt::format("ep={} does not divide tp={}", p.ep, p.tp));
  if (p.tp % p.dp != 0) invalid(fmt::format("dp={} does not divide tp={}", p.dp, p.tp));
}

// Linear attention (Qwen3-Next) over the attention group: every rank whole key-head groups, each
// with its value heads, as the engines view a rank's projections.
void validate_linear_attention(const ModelConfig& m, uint64_t a, const std::string& ranks) {
  if (std::find(m.linear_layer.begin(), m.linear_layer.end(), true) == m.linear_layer.end()) return;
  for (const auto& [field, heads] : {std::pair{"linear_num_key_heads", m.linear_key_heads},
                                     std::pair{"linear_num_value_heads", m.linear_value_heads}}) {
    if (heads % a != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} does not divide {} linear-attention heads", ranks, heads),
                  {.file = "config.json", .field = field, .expected = fmt::format("a multiple of {}", a),
                   .found = std::to_string(heads)});
    }
  }
}

// Head counts over the attention group: every rank whole heads, kv heads split or replicated evenly.
void validate_attention(const ModelConfig& m, const ParallelConfig& p) {
  const uint64_t a = p.split_group(ParamGroup::kAttention, 0).size;
  const std::string ranks = split_text(p, ParamGroup::kAttention);
  if (m.heads % a != 0) invalid(fmt::format("{} does not divide {} attention heads", ranks, m.heads));
  validate_linear_attention(m, a, ranks);
  if (m.is_mla()) return;
  // Gemma 4's full-attention layers have KV heads of their own.
  const bool global_layers = std::find(m.global_layer.begin(), m.global_layer.end(), true) != m.global_layer.end();
  for (const uint64_t kv_heads : {m.kv_heads, global_layers ? m.global_kv_heads : m.kv_heads}) {
    if (a >= kv_heads && a % kv_heads != 0) {
      invalid(fmt::format("{} is not a multiple of {} kv heads", ranks, kv_heads));
    }
    if (a < kv_heads && kv_heads % a != 0) {
      invalid(fmt::format("{} does not divide {} kv heads", ranks, kv_heads));
    }
  }
}

void validate_vocab(const ModelConfig& m, const ParallelConfig& p) {
  const uint64_t padded_vocab = padded_vocab_rows(m.vocab);
  for (const ParamGroup group : {ParamGroup::kEmbedding, ParamGroup::kLmHead}) {
    if (group == ParamGroup::kLmHead && m.tie_embeddings) continue;
    if (padded_vocab % p.split_group(group, 0).size != 0) {
      invalid(fmt::format("{} does not divide the vocabulary padded to {} ({})", split_text(p, group),
                          padded_vocab, group_name(group)));
    }
  }
}

}  // namespace

void validate_layout(const ModelConfig& m, const ParallelConfig& p) {
  validate_sizes(p);
  validate_attention(m, p);
  validate_vocab(m, p);
  const int tp = p.tp;
  const int ep = p.ep;
  const bool has_dense_mlp = m.moe_layer_count() < m.layers;
  if (has_dense_mlp && m.intermediate % p.split_group(ParamGroup::kDenseMlp, 0).size != 0) {
    invalid(fmt::format("{} does not divide intermediate size {}", split_text(p, ParamGroup::kDenseMlp),
                        m.intermediate));
  }
  if (!m.is_moe() || m.moe_layer_count() == 0) {
    if (ep > 1) invalid(fmt::format("ep={} needs a model with experts", ep));
    if (p.redundant_experts.value_or(0) != 0)
      invalid("--redundant-experts needs a model with experts");
    if (!p.expert_map.empty()) invalid("--expert-map needs a model with experts");
    return;
  }
  const uint64_t moe_tp = static_cast<uint64_t>(tp / ep);
  if (m.moe_intermediate % moe_tp != 0) {
    invalid(fmt::format("moe tp={} (tp/ep) does not divide expert intermediate size {}", moe_tp,
                        m.moe_intermediate));
  }
  if (m.shared_intermediate > 0 &&
      m.shared_intermediate % p.split_group(ParamGroup::kSharedExperts, 0).size != 0) {
    invalid(fmt::format("{} does not divide shared expert intermediate size {}",
                        split_text(p, ParamGroup::kSharedExperts), m.shared_intermediate));
  }
  if (p.redundant_experts && *p.redundant_experts < 0) {
    invalid(fmt::format("--redundant-experts {} is negative", *p.redundant_experts));
  }
  uint64_t physical = m.experts + static_cast<uint64_t>(p.redundant_experts.value_or(0));
  if (!p.expert_map.empty()) physical = validate_expert_map(m, p.expert_map, p.redundant_experts);
  if (physical % static_cast<uint64_t>(ep) != 0) {
    invalid(fmt::format("ep={} does not divide {} physical experts", ep, physical));
  }
}

}  // namespace shardload
