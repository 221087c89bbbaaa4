#pragma once

// docs/layout.md run backwards, written apart from the planner: from the rank tensors of
// an export (and its manifest and copied config.json) rebuild every checkpoint tensor, in the
// export's dtype. Whatever the spec says is equal across ranks (replicated tensors, kv-head
// replicas, expert replicas) is checked to be equal on the way; padding is checked to be zero.
// compare_with_checkpoint() (compare.h) then holds the rebuilt tensors to the original checkpoint,
// value by value after the same cast.

#include <algorithm>
#include <initializer_list>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "export_reader.h"
#include "shardload/checkpoint.h"

namespace shardload::testing {

// A checkpoint tensor rebuilt from the ranks: its values as the export stores them. `divisor` != 1
// for a row-parallel bias exported with --row-bias divided (each rank holds value / divisor).
struct Rebuilt {
  HostTensor tensor;
  uint32_t divisor = 1;
  std::string from;  // the rank tensor it came from, for messages
};
using RebuiltCheckpoint = std::map<std::string, Rebuilt>;

// What the inverse rules need from config.json, with layout.md's defaults, read here rather than
// through ModelConfig so that a misreading in the engine cannot hide itself.
struct ConfigView {
  std::string architecture;
  uint64_t hidden = 0;
  uint64_t vocab = 0;
  uint64_t heads = 0;
  uint64_t kv_heads = 0;
  uint64_t head_dim = 0;
  uint64_t q_lora_rank = 0;
  uint64_t experts = 0;
  int layers = 0;
  bool tie_embeddings = false;
  bool per_layer_qk_norm = false;  // MiniMax-M2: one norm over the whole q (k) projection, split by heads
  // Qwen3-Next: q_proj holds each head's query then its output gate (2 x head_dim rows a head); the
  // linear attention's conv1d stacks key_dim q, key_dim k and value_dim v channels.
  bool gated_q = false;
  // Qwen3.5: in_proj_qkv / in_proj_z and in_proj_b / in_proj_a stored apart; a rank's in_proj_qkvz holds its
  // share of q, of k, of v, then of z (its in_proj_ba its b, then its a).
  bool separate_projections = false;
  uint64_t linear_key_dim = 0;
  uint64_t linear_value_dim = 0;
  // Gemma 4: the full-attention layers' own head size and KV heads (global_head_dim and
  // num_global_key_value_heads, or per_layer_config), K reused as V there (attention_k_eq_v), the
  // layers from first_kv_shared on reading an earlier layer's cache (q_proj alone), its fused
  // [E, out, in] experts.
  bool gemma4 = false;
  std::vector<bool> full_layer;
  uint64_t global_head_dim = 0;
  uint64_t global_kv_heads = 0;
  bool k_eq_v = false;
  int first_kv_shared = 1 << 30;
  uint64_t per_layer_hidden = 0;  // hidden_size_per_layer_input
  uint64_t per_layer_vocab = 0;   // vocab_size_per_layer_input

  bool full(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < full_layer.size() && full_layer[static_cast<size_t>(layer)];
  }
  uint64_t head_dim_of(int layer) const { return full(layer) ? global_head_dim : head_dim; }
  uint64_t kv_heads_of(int layer) const { return full(layer) ? global_kv_heads : kv_heads; }

  static ConfigView from_json(const nlohmann::json& c) {
    auto number = [&](const char* key, uint64_t fallback) {
      const auto it = c.find(key);
      return it == c.end() || it->is_null() ? fallback : it->get<uint64_t>();
    };
    ConfigView v;
    v.architecture = c.at("architectures").at(0).get<std::string>();
    v.hidden = number("hidden_size", 0);
    v.vocab = number("vocab_size", 0);
    v.heads = number("num_attention_heads", 1);
    v.kv_heads = number("num_key_value_heads", v.heads);
    v.head_dim = number("head_dim", v.hidden / v.heads);
    v.q_lora_rank = number("q_lora_rank", 0);
    for (const char* key :
         {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}) {
      v.experts = std::max(v.experts, number(key, 0));
    }
    v.layers = static_cast<int>(number("num_hidden_layers", 0));
    v.tie_embeddings = c.value("tie_word_embeddings", false);
    v.per_layer_qk_norm = c.value("qk_norm_type", "") == "per_layer";
    v.separate_projections = v.architecture.starts_with("Qwen3_5");
    v.gated_q = v.architecture == "Qwen3NextForCausalLM" || v.separate_projections;
    v.linear_key_dim = number("linear_num_key_heads", 0) * number("linear_key_head_dim", 0);
    v.linear_value_dim = number("linear_num_value_heads", 0) * number("linear_value_head_dim", 0);
    v.gemma4 = v.architecture == "Gemma4ForCausalLM";
    if (v.gemma4) {
      v.k_eq_v = c.value("attention_k_eq_v", false);
      v.global_head_dim = number("global_head_dim", 512);
      v.global_kv_heads = v.k_eq_v ? number("num_global_key_value_heads", v.kv_heads) : v.kv_heads;
      const auto& types = c.at("layer_types");
      for (const auto& type : types) v.full_layer.push_back(type == "full_attention");
      if (!v.full_layer.empty()) v.full_layer.back() = true;
      if (const auto it = c.find("per_layer_config"); it != c.end() && it->is_object()) {
        for (const auto& [layer, override] : it->items()) {
          if (!v.full(std::stoi(layer))) continue;
          v.global_head_dim = override.value("head_dim", v.head_dim);
          v.global_kv_heads = override.value("num_key_value_heads", v.kv_heads);
        }
      }
      v.first_kv_shared = v.layers - static_cast<int>(number("num_kv_shared_layers", 0));
      v.per_layer_hidden = number("hidden_size_per_layer_input", 256);
      v.per_layer_vocab = number("vocab_size_per_layer_input", 262144);
      v.tie_embeddings = c.value("tie_word_embeddings", true);
    }
    return v;
  }
  bool is_ernie_moe() const { return architecture == "Ernie4_5_MoeForCausalLM"; }
};

// Rank tensors that layout.md keeps in float32 whatever --dtype says.
inline bool kept_float32(std::string_view name, const ConfigView& config) {
  // MiniMax-M2's router is float32 on the Hub and in vLLM (Mixtral's is in the model dtype).
  if (config.architecture == "MiniMaxM2ForCausalLM" && name.ends_with("block_sparse_moe.gate.weight")) return true;
  // ERNIE-4.5-MoE's too (the Hub's, vLLM's and FastDeploy's).
  if (config.architecture == "Ernie4_5_MoeForCausalLM" && name.ends_with("mlp.gate.weight")) return true;
  // GLM-4.5's and GLM-4.7-Flash's (vLLM's and SGLang's, and transformers writes them float32).
  if ((config.architecture == "Glm4MoeForCausalLM" || config.architecture == "Glm4MoeLiteForCausalLM") &&
      name.ends_with("mlp.gate.weight")) {
    return true;
  }
  return name.ends_with("self_attn.q_norm.weight") || name.ends_with("self_attn.k_norm.weight") ||
         name.ends_with("e_score_correction_bias") || name.ends_with("linear_attn.A_log");
}

// The decoder layer of "model.layers.N....", or -1.
inline int layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  int layer = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return layer;
}

// Checkpoint tensors that layout.md lets an export leave out, each by its stated rule.
inline bool skipped_by_rule(std::string_view name, const ConfigView& config) {
  if (name.ends_with("rotary_emb.inv_freq") || name.ends_with("rotary_emb.cos_cached") ||
      name.ends_with("rotary_emb.sin_cached")) {
    return true;
  }
  if (name == "lm_head.weight" && config.tie_embeddings) return true;
  if (layer_of(name) >= config.layers) return true;  // multi-token-prediction layers
  if (config.is_ernie_moe() && name.find("mtp") != std::string_view::npos) return true;
  if (config.gated_q && name.starts_with("mtp.")) return true;  // Qwen3-Next's multi-token-prediction block
  // Gemma 4's layers on an earlier layer's KV cache: the K/V tensors a checkpoint still ships for them.
  if (config.gemma4 && layer_of(name) >= config.first_kv_shared &&
      (name.ends_with(".self_attn.k_proj.weight") || name.ends_with(".self_attn.v_proj.weight") ||
       name.ends_with(".self_attn.k_norm.weight"))) {
    return true;
  }
  return false;
}

namespace internal {

inline HostTensor slice_rows(const HostTensor& t, uint64_t begin, uint64_t end) {
  HostTensor out{t.dtype, t.shape, {}};
  out.shape[0] = end - begin;
  out.bytes.assign(t.row(begin), t.row(begin) + (end - begin) * t.row_bytes());
  return out;
}

inline HostTensor concat_rows(const std::vector<const HostTensor*>& parts) {
  HostTensor out{parts.at(0)->dtype, parts.at(0)->shape, {}};
  out.shape[0] = 0;
  size_t bytes = 0;
  for (const HostTensor* part : parts) bytes += part->bytes.size();
  out.bytes.reserve(bytes);
  for (const HostTensor* part : parts) {
    out.shape[0] += part->rows();
    out.bytes.insert(out.bytes.end(), part->bytes.begin(), part->bytes.end());
  }
  return out;
}

inline HostTensor concat_rows(const std::vector<HostTensor>& parts) {
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& part : parts) pointers.push_back(&part);
  return concat_rows(pointers);
}

// [out, in_r] blocks side by side -> [out, sum in_r].
inline HostTensor concat_columns(const std::vector<const HostTensor*>& parts) {
  HostTensor out{parts.at(0)->dtype, parts.at(0)->shape, {}};
  out.shape[1] = 0;
  size_t bytes = 0;
  for (const HostTensor* part : parts) {
    out.shape[1] += part->shape.at(1);
    bytes += part->bytes.size();
  }
  out.bytes.reserve(bytes);
  for (uint64_t row = 0; row < out.rows(); ++row) {
    for (const HostTensor* part : parts) {
      out.bytes.insert(out.bytes.end(), part->row(row), part->row(row) + part->row_bytes());
    }
  }
  return out;
}

}  // namespace internal

// The inverse of layout.md over one export. Construct, then run().
class Reassembler {
 public:
  Reassembler(const ExportContents& contents, Problems& problems)
      : ex_(contents), problems_(problems), config_(ConfigView::from_json(contents.config)) {
    const nlohmann::json& m = contents.manifest;
    tp_ = m.at("tp_size").get<uint64_t>();
    ep_ = m.at("ep_size").get<uint64_t>();
    moe_tp_ = tp_ / ep_;
    divided_ = m.at("row_bias").get<std::string>() == "divided";
    split_shared_ = !m.at("no_split_shared_experts").get<bool>();
    map_ = m.at("physical_to_logical_map").get<std::vector<std::vector<int>>>();
    dtype_ = parse_dtype(m.at("dtype").get<std::string>());
    if (!dtype_)
      problems_.add("manifest dtype {} is not a safetensors dtype", m.at("dtype").dump());
  }

  RebuiltCheckpoint run() {
    if (ex_.ranks.empty() || ex_.ranks.size() != tp_) return {};
    const auto& first = ex_.ranks[0];
    check_same_names();
    // MoE layers in layer order: row k of physical_to_logical_map is the k-th of them.
    std::set<int> moe_layers;
    for (const auto& [name, tensor] : first) {
      if (name.ends_with("experts.w13_weight")) moe_layers.insert(layer_of(name));
    }
    moe_layers_.assign(moe_layers.begin(), moe_layers.end());
    if (map_.size() != moe_layers_.size()) {
      problems_.add("physical_to_logical_map has {} rows for {} MoE layers in the ranks",
                    map_.size(), moe_layers_.size());
    }
    for (const auto& [name, tensor] : first) {
      if (!consistent_across_ranks(name)) continue;
      rebuild(name);
    }
    if (config_.architecture.starts_with("Llama4")) llama4_checkpoint_order();
    if (config_.gemma4) gemma4_checkpoint_order();
    return std::move(out_);
  }

 private:
  const HostTensor& at(uint64_t rank, const std::string& name) const {
    return ex_.ranks[rank].at(name);
  }
  std::vector<const HostTensor*> all_ranks(const std::string& name) const {
    std::vector<const HostTensor*> out;
    for (uint64_t r = 0; r < tp_; ++r) out.push_back(&at(r, name));
    return out;
  }

  void emit(const std::string& checkpoint_name, HostTensor tensor, const std::string& from,
            uint32_t divisor = 1) {
    if (out_.contains(checkpoint_name)) {
      problems_.add("{} is rebuilt twice (second time from {})", checkpoint_name, from);
      return;
    }
    out_.emplace(checkpoint_name, Rebuilt{std::move(tensor), divisor, from});
  }

  void check_same_names() {
    for (uint64_t r = 1; r < tp_; ++r) {
      for (const auto& [name, tensor] : ex_.ranks[r]) {
        if (!ex_.ranks[0].contains(name)) problems_.add("rank {} has {}, rank 0 has not", r, name);
      }
      for (const auto& [name, tensor] : ex_.ranks[0]) {
        if (!ex_.ranks[r].contains(name)) problems_.add("rank 0 has {}, rank {} has not", name, r);
      }
    }
  }

  // Every rank has the tensor, with one dtype and shape (all splits are equal blocks), and the
  // dtype is the export dtype, or float32 for the tensors layout.md keeps in float32.
  bool consistent_across_ranks(const std::string& name) {
    const HostTensor& t0 = at(0, name);
    for (uint64_t r = 1; r < tp_; ++r) {
      const auto it = ex_.ranks[r].find(name);
      if (it == ex_.ranks[r].end()) return false;
      if (it->second.dtype != t0.dtype || it->second.shape != t0.shape) {
        problems_.add("{}: rank {} has {} {}, rank 0 has {} {}", name, r,
                      dtype_name(it->second.dtype), shape_string(it->second.shape),
                      dtype_name(t0.dtype), shape_string(t0.shape));
        return false;
      }
    }
    const DType expected = kept_float32(name, config_) ? DType::kF32 : dtype_.value_or(t0.dtype);
    if (t0.dtype != expected) {
      problems_.add("{}: dtype {}, expected {}", name, dtype_name(t0.dtype), dtype_name(expected));
    }
    if (t0.shape.empty() || t0.shape.size() > 3) {
      problems_.add("{}: unexpected rank-tensor shape {}", name, shape_string(t0.shape));
      return false;
    }
    return true;
  }

  // Replicated: equal bytes on every rank; the copy of rank 0.
  bool replicated(const std::string& name, HostTensor& out) {
    bool equal = true;
    for (uint64_t r = 1; r < tp_; ++r) {
      if (at(r, name).bytes != at(0, name).bytes) {
        problems_.add("{}: replicated tensor differs between rank 0 and rank {}", name, r);
        equal = false;
      }
    }
    out = at(0, name);
    return equal;
  }

  void rebuild(const std::string& name) {
    const std::string_view n = name;
    if (n == "model.embed_tokens.weight" || n == "lm_head.weight" || n == "model.embed_tokens_per_layer.weight") {
      return vocab(name);
    }
    if (n.ends_with("self_attn.qkv_proj.weight")) return qkv(name, ".weight");
    if (n.ends_with("self_attn.qkv_proj.bias")) return qkv(name, ".bias");
    if (n.ends_with("experts.w13_weight")) return w13(name);
    if (n.ends_with("experts.w2_weight")) return w2(name);
    if (n.ends_with("shared_expert.gate_up_proj.weight") ||
        n.ends_with("shared_experts.gate_up_proj.weight")) {
      return gate_up(name, split_shared_);
    }
    if (n.ends_with("mlp.gate_up_proj.weight") || n.ends_with("mlp.gate_up_proj.bias") ||
        n.ends_with("feed_forward.gate_up_proj.weight")) {
      return gate_up(name, true);
    }
    if (n.ends_with("shared_expert.down_proj.weight") ||
        n.ends_with("shared_experts.down_proj.weight")) {
      return row_parallel(name, split_shared_);
    }
    if (config_.separate_projections &&
        (n.ends_with("linear_attn.in_proj_qkvz.weight") || n.ends_with("linear_attn.in_proj_ba.weight"))) {
      return separate_parts(name);
    }
    if (n.ends_with("linear_attn.in_proj_qkvz.weight") || n.ends_with("linear_attn.in_proj_ba.weight") ||
        n.ends_with("linear_attn.A_log") || n.ends_with("linear_attn.dt_bias")) {
      return column(name);
    }
    if (n.ends_with("linear_attn.conv1d.weight")) return conv_channels(name);
    if (n.ends_with("linear_attn.out_proj.weight")) return row_parallel(name, true);
    if (n.ends_with("self_attn.o_proj.weight") || n.ends_with("mlp.down_proj.weight") ||
        n.ends_with("feed_forward.down_proj.weight")) {
      return row_parallel(name, true);
    }
    if (n.ends_with("self_attn.o_proj.bias") || n.ends_with("mlp.down_proj.bias"))
      return row_bias(name);
    if (n.ends_with("self_attn.q_b_proj.weight") || n.ends_with("self_attn.kv_b_proj.weight") ||
        n.ends_with("self_attn.q_proj.weight") || n == "model.per_layer_model_projection.weight") {
      return column(name);
    }
    if (n.ends_with("self_attn.fused_qkv_a_proj.weight")) return fused_qkv_a(name);
    if (n.ends_with("gate.e_score_correction_bias") || n.ends_with("block_sparse_moe.e_score_correction_bias")) {
      return score_bias(name);
    }
    if (config_.per_layer_qk_norm && n.ends_with("self_attn.q_norm.weight")) return column(name);
    if (config_.per_layer_qk_norm && n.ends_with("self_attn.k_norm.weight")) return kv_head_rows(name);
    for (std::string_view suffix :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
          "self_attn.k_norm.weight", "self_attn.q_a_layernorm.weight",
          "self_attn.kv_a_layernorm.weight", "self_attn.kv_a_proj_with_mqa.weight",
          "mlp.gate.weight", "block_sparse_moe.gate.weight", "mlp.shared_expert_gate.weight",
          "feed_forward.router.weight",
          "self_attn.indexer.wq_b.weight", "self_attn.indexer.wk.weight", "self_attn.indexer.k_norm.weight",
          "self_attn.indexer.k_norm.bias", "self_attn.indexer.weights_proj.weight", "linear_attn.norm.weight",
          // Gemma 4's
          "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight", "pre_feedforward_layernorm_2.weight",
          "post_feedforward_layernorm_1.weight", "post_feedforward_layernorm_2.weight", ".layer_scalar",
          "router.proj.weight", "router.scale", "router.per_expert_scale", "per_layer_input_gate.weight",
          "per_layer_projection.weight", "post_per_layer_input_norm.weight"}) {
      if (n.ends_with(suffix)) {
        HostTensor whole;
        replicated(name, whole);
        return emit(name, std::move(whole), name);
      }
    }
    if (n == "model.norm.weight" || n == "model.per_layer_projection_norm.weight") {
      HostTensor whole;
      replicated(name, whole);
      return emit(name, std::move(whole), name);
    }
    problems_.add("{}: no rule of layout.md produces this rank tensor", name);
  }

  // Vocab-parallel: rank r holds rows [r*Vp/T, (r+1)*Vp/T) of the table padded to a multiple of 64.
  // Gemma 4's per-layer table: vocab_size_per_layer_input rows of layers x hidden_size_per_layer_input.
  void vocab(const std::string& name) {
    const bool per_layer = name == "model.embed_tokens_per_layer.weight";
    const uint64_t vocab = per_layer ? config_.per_layer_vocab : config_.vocab;
    const uint64_t padded = (vocab + 63) / 64 * 64;
    const uint64_t columns =
        per_layer ? static_cast<uint64_t>(config_.layers) * config_.per_layer_hidden : config_.hidden;
    const Shape expected = {padded / tp_, columns};
    if (at(0, name).shape != expected) {
      return problems_.add("{}: rank shape {}, expected {} (vocab {} padded to {}, tp {})", name,
                           shape_string(at(0, name).shape), shape_string(expected), vocab, padded, tp_);
    }
    const HostTensor table = internal::concat_rows(all_ranks(name));
    for (uint64_t row = vocab; row < padded; ++row) {
      const std::byte* p = table.row(row);
      if (std::any_of(p, p + table.row_bytes(), [](std::byte b) { return b != std::byte{0}; })) {
        problems_.add("{}: padding row {} (rank {}, local row {}) is not zero", name, row,
                      row / (padded / tp_), row % (padded / tp_));
      }
    }
    emit(name, internal::slice_rows(table, 0, vocab), name);
  }

  // q block, then k, then v; with T >= Hkv every rank holds one kv head, replicated T/Hkv times.
  void qkv(const std::string& name, const std::string& suffix) {
    const std::string prefix =
        name.substr(0, name.size() - std::string("qkv_proj").size() - suffix.size());
    // Gemma 4's layers each with their own head size and KV heads.
    const int layer = layer_of(name);
    const uint64_t d = config_.head_dim_of(layer);
    const uint64_t kv_heads = config_.kv_heads_of(layer);
    // A gated query's rows count twice: each head's query rows then its gate rows.
    const uint64_t nq = config_.heads / tp_ * (config_.gated_q ? 2 : 1);
    const bool replicate = tp_ >= kv_heads;
    const uint64_t nkv = replicate ? 1 : kv_heads / tp_;
    const uint64_t rows = (nq + 2 * nkv) * d;
    if (at(0, name).rows() != rows) {
      return problems_.add("{}: {} rows, expected (q rows {} + 2 * nkv {}) * head_dim {} = {}", name,
                           at(0, name).rows(), nq, nkv, d, rows);
    }
    std::vector<HostTensor> q, k, v;
    for (uint64_t r = 0; r < tp_; ++r) {
      const HostTensor& t = at(r, name);
      q.push_back(internal::slice_rows(t, 0, nq * d));
      k.push_back(internal::slice_rows(t, nq * d, (nq + nkv) * d));
      v.push_back(internal::slice_rows(t, (nq + nkv) * d, rows));
    }
    if (replicate) keep_one_copy_per_kv_head(name, {&k, &v}, kv_heads);
    emit(prefix + "q_proj" + suffix, internal::concat_rows(q), name);
    emit(prefix + "k_proj" + suffix, internal::concat_rows(k), name);
    // Gemma 4's K reused as V: the V rows are k_proj's again, and the checkpoint has no v_proj.
    if (config_.gemma4 && config_.k_eq_v && config_.full(layer)) {
      for (uint64_t r = 0; r < k.size(); ++r) {
        if (k[r].bytes != v[r].bytes) problems_.add("{}: the V rows of share {} are not its K rows", name, r);
      }
      return;
    }
    emit(prefix + "v_proj" + suffix, internal::concat_rows(v), name);
  }

  // Rows [0, n) of each rank are gate rows, rows [n, 2n) up rows of the same range.
  void gate_up(const std::string& name, bool split) {
    const std::string_view n = name;
    const std::string suffix = n.ends_with(".bias") ? ".bias" : ".weight";
    const std::string prefix =
        name.substr(0, name.size() - std::string("gate_up_proj").size() - suffix.size());
    const uint64_t rows = at(0, name).rows();
    if (rows % 2 != 0) return problems_.add("{}: odd row count {}", name, rows);
    std::vector<HostTensor> gate, up;
    if (split) {
      for (uint64_t r = 0; r < tp_; ++r) {
        gate.push_back(internal::slice_rows(at(r, name), 0, rows / 2));
        up.push_back(internal::slice_rows(at(r, name), rows / 2, rows));
      }
    } else {
      HostTensor whole;
      replicated(name, whole);
      gate.push_back(internal::slice_rows(whole, 0, rows / 2));
      up.push_back(internal::slice_rows(whole, rows / 2, rows));
    }
    emit(prefix + "gate_proj" + suffix, internal::concat_rows(gate), name);
    emit(prefix + "up_proj" + suffix, internal::concat_rows(up), name);
  }

  void column(const std::string& name) { emit(name, internal::concat_rows(all_ranks(name)), name); }

  // Qwen3.5's in_proj_qkvz (in_proj_ba): rank r's rows are its share of each part in turn; the checkpoint
  // stores q, k and v as one tensor and z apart (b and a apart).
  void separate_parts(const std::string& name) {
    const bool qkvz = name.ends_with("in_proj_qkvz.weight");
    const std::string_view tail = qkvz ? "qkvz.weight" : "ba.weight";
    const std::string prefix = name.substr(0, name.size() - tail.size());
    const uint64_t heads = at(0, name).rows() / 2;  // in_proj_ba: nv / T rows of b, then of a
    const std::vector<uint64_t> rows =
        qkvz ? std::vector<uint64_t>{config_.linear_key_dim / tp_, config_.linear_key_dim / tp_,
                                     config_.linear_value_dim / tp_, config_.linear_value_dim / tp_}
             : std::vector<uint64_t>{heads, heads};
    uint64_t total = 0;
    for (uint64_t n : rows) total += n;
    if (at(0, name).rows() != total) {
      return problems_.add("{}: {} rows, expected {} (the parts' shares)", name, at(0, name).rows(), total);
    }
    std::vector<std::vector<HostTensor>> parts(rows.size());
    for (uint64_t r = 0; r < tp_; ++r) {
      uint64_t begin = 0;
      for (size_t k = 0; k < rows.size(); ++k) {
        parts[k].push_back(internal::slice_rows(at(r, name), begin, begin + rows[k]));
        begin += rows[k];
      }
    }
    if (qkvz) {
      emit(prefix + "qkv.weight",
           internal::concat_rows({internal::concat_rows(parts[0]), internal::concat_rows(parts[1]),
                                  internal::concat_rows(parts[2])}),
           name);
      emit(prefix + "z.weight", internal::concat_rows(parts[3]), name);
    } else {
      emit(prefix + "b.weight", internal::concat_rows(parts[0]), name);
      emit(prefix + "a.weight", internal::concat_rows(parts[1]), name);
    }
  }

  // Qwen3-Next's conv1d [C/T, 1, K]: each rank's rows are its share of the q channels, then of the k
  // channels, then of the v channels; the checkpoint's are all q, all k, all v.
  void conv_channels(const std::string& name) {
    const uint64_t q = config_.linear_key_dim / tp_;
    const uint64_t v = config_.linear_value_dim / tp_;
    if (at(0, name).rows() != 2 * q + v) {
      return problems_.add("{}: {} rows, expected 2 * key_dim / T {} + value_dim / T {}", name, at(0, name).rows(),
                           q, v);
    }
    std::vector<HostTensor> parts[3];
    for (uint64_t r = 0; r < tp_; ++r) {
      parts[0].push_back(internal::slice_rows(at(r, name), 0, q));
      parts[1].push_back(internal::slice_rows(at(r, name), q, 2 * q));
      parts[2].push_back(internal::slice_rows(at(r, name), 2 * q, 2 * q + v));
    }
    std::vector<HostTensor> whole;
    for (const auto& part : parts) whole.push_back(internal::concat_rows(part));
    emit(name, internal::concat_rows(whole), name);
  }

  // Rows of the kv heads: in blocks over the ranks, or one head per rank replicated T/Hkv times.
  void kv_head_rows(const std::string& name) {
    if (tp_ < config_.kv_heads) return column(name);
    std::vector<HostTensor> rows;
    for (uint64_t r = 0; r < tp_; ++r) rows.push_back(at(r, name));
    keep_one_copy_per_kv_head(name, {&rows}, config_.kv_heads);
    emit(name, internal::concat_rows(rows), name);
  }

  // With T >= Hkv, ranks h*rep .. h*rep+rep-1 hold kv head h: keeps rank h*rep's copy of each part
  // (per-rank tensors, in rank order), after checking the other ranks' copies match it.
  void keep_one_copy_per_kv_head(const std::string& name, std::initializer_list<std::vector<HostTensor>*> parts,
                                 uint64_t kv_heads) {
    const uint64_t rep = tp_ / kv_heads;
    for (uint64_t h = 0; h < kv_heads; ++h) {
      for (uint64_t r = h * rep + 1; r < (h + 1) * rep; ++r) {
        if (std::any_of(parts.begin(), parts.end(),
                        [&](const std::vector<HostTensor>* p) { return (*p)[r].bytes != (*p)[h * rep].bytes; })) {
          problems_.add("{}: kv head {} on rank {} differs from its copy on rank {}", name, h, r, h * rep);
        }
      }
    }
    for (std::vector<HostTensor>* part : parts) {
      std::vector<HostTensor> heads;
      for (uint64_t h = 0; h < kv_heads; ++h) heads.push_back((*part)[h * rep]);
      *part = std::move(heads);
    }
  }

  void row_parallel(const std::string& name, bool split) {
    if (at(0, name).shape.size() != 2) return problems_.add("{}: not a matrix", name);
    if (!split) {
      HostTensor whole;
      replicated(name, whole);
      return emit(name, std::move(whole), name);
    }
    emit(name, internal::concat_columns(all_ranks(name)), name);
  }

  void row_bias(const std::string& name) {
    HostTensor whole;
    replicated(name, whole);
    emit(name, std::move(whole), name, divided_ ? static_cast<uint32_t>(tp_) : 1);
  }

  // Replicated; rows q_a then kv_a.
  void fused_qkv_a(const std::string& name) {
    const std::string prefix =
        name.substr(0, name.size() - std::string("fused_qkv_a_proj.weight").size());
    HostTensor whole;
    replicated(name, whole);
    if (whole.rows() <= config_.q_lora_rank) {
      return problems_.add("{}: {} rows, no room for q_lora_rank {} plus kv_a", name, whole.rows(),
                           config_.q_lora_rank);
    }
    emit(prefix + "q_a_proj.weight", internal::slice_rows(whole, 0, config_.q_lora_rank), name);
    emit(prefix + "kv_a_proj_with_mqa.weight",
         internal::slice_rows(whole, config_.q_lora_rank, whole.rows()), name);
  }

  // Replicated float32 [E]; ERNIE's comes from moe_statics [1, E].
  void score_bias(const std::string& name) {
    HostTensor whole;
    replicated(name, whole);
    if (whole.shape != Shape{config_.experts}) {
      return problems_.add("{}: shape {}, expected [{}]", name, shape_string(whole.shape),
                           config_.experts);
    }
    if (!config_.is_ernie_moe()) return emit(name, std::move(whole), name);
    const std::string prefix =
        name.substr(0, name.size() - std::string("gate.e_score_correction_bias").size());
    whole.shape = {1, config_.experts};
    emit(prefix + "moe_statics.e_score_correction_bias", std::move(whole), name);
  }

  // The MoE geometry of one expert tensor: its map row, El, and the checkpoint's expert names.
  struct ExpertLayer {
    const std::vector<int>* map = nullptr;
    uint64_t local = 0;  // El
    std::string module;  // "model.layers.N.mlp." or "...block_sparse_moe."
    std::string gate, up, down;
  };

  std::optional<ExpertLayer> expert_layer(const std::string& name, std::string_view suffix) {
    ExpertLayer e;
    e.module = name.substr(0, name.size() - suffix.size());
    const bool mixtral = std::string_view(e.module).ends_with("block_sparse_moe.");
    e.gate = mixtral ? "w1" : "gate_proj";
    e.up = mixtral ? "w3" : "up_proj";
    e.down = mixtral ? "w2" : "down_proj";
    const auto it = std::find(moe_layers_.begin(), moe_layers_.end(), layer_of(name));
    const size_t row = static_cast<size_t>(it - moe_layers_.begin());
    if (row >= map_.size()) {
      problems_.add("{}: no physical_to_logical_map row for it", name);
      return std::nullopt;
    }
    e.map = &map_[row];
    const uint64_t physical = e.map->size();
    if (physical == 0 || physical % ep_ != 0) {
      problems_.add("{}: {} physical experts do not split over ep {}", name, physical, ep_);
      return std::nullopt;
    }
    e.local = physical / ep_;
    if (at(0, name).shape.size() != 3 || at(0, name).shape[0] != e.local) {
      problems_.add("{}: shape {}, expected [El = {}, ...]", name, shape_string(at(0, name).shape),
                    e.local);
      return std::nullopt;
    }
    for (int logical : *e.map) {
      if (logical < 0 || static_cast<uint64_t>(logical) >= config_.experts) {
        problems_.add("{}: map names expert {} of {}", name, logical, config_.experts);
        return std::nullopt;
      }
    }
    return e;
  }

  // Copies `n` bytes to `dst` for the first replica of an expert, or checks a later replica's bytes
  // against the first's.
  void place(bool first, std::byte* dst, const std::byte* src, size_t n, const std::string& what,
             uint64_t x, uint64_t physical) {
    if (first) {
      std::memcpy(dst, src, n);
    } else if (std::memcmp(dst, src, n) != 0 && reported_.insert({what, physical}).second) {
      problems_.add(
          "{}: physical expert {} (a replica of logical expert {}) differs from the first "
          "copy of it",
          what, physical, x);
    }
  }

  void emit_experts(const ExpertLayer& e, const std::string& from, const std::string& proj,
                    std::map<uint64_t, HostTensor>& experts) {
    for (uint64_t x = 0; x < config_.experts; ++x) {
      if (!experts.contains(x)) {
        problems_.add("{}: logical expert {} is in no slot", from, x);
        continue;
      }
      emit(e.module + "experts." + std::to_string(x) + "." + proj + ".weight",
           std::move(experts[x]), from);
    }
  }

  // w13 [El, 2*Im/Tm, H]: slot j of EP rank e is physical e*El + j; its rows [0, Im/Tm) are gate
  // rows [rm*Im/Tm, ...), then up rows of the same range. Every moe-tp rank of the EP rank holds
  // its block of the same slots, so the first physical replica of an expert writes all of it.
  void w13(const std::string& name) {
    const auto e = expert_layer(name, "experts.w13_weight");
    if (!e) return;
    const HostTensor& t0 = at(0, name);
    const uint64_t local_rows = t0.shape[1];
    if (local_rows % 2 != 0) return problems_.add("{}: odd row count {}", name, local_rows);
    const uint64_t half = local_rows / 2;
    const size_t row_bytes = t0.shape[2] * t0.element_bytes();
    const size_t block = half * row_bytes;
    std::map<uint64_t, HostTensor> gate, up;
    for (uint64_t p = 0; p < e->map->size(); ++p) {
      const uint64_t x = static_cast<uint64_t>((*e->map)[p]);
      const bool first = !gate.contains(x);
      if (first) {
        for (auto* out : {&gate, &up}) {
          (*out)[x] = HostTensor{
              t0.dtype, {half * moe_tp_, t0.shape[2]}, std::vector<std::byte>(moe_tp_ * block)};
        }
      }
      for (uint64_t rm = 0; rm < moe_tp_; ++rm) {
        const std::byte* slot = at((p / e->local) * moe_tp_ + rm, name).row(p % e->local);
        place(first, gate[x].bytes.data() + rm * block, slot, block, name, x, p);
        place(first, up[x].bytes.data() + rm * block, slot + block, block, name, x, p);
      }
    }
    emit_experts(*e, name, e->gate, gate);
    emit_experts(*e, name, e->up, up);
  }

  // w2 [El, H, Im/Tm]: columns [rm*Im/Tm, ...) of each expert's down projection.
  void w2(const std::string& name) {
    const auto e = expert_layer(name, "experts.w2_weight");
    if (!e) return;
    const HostTensor& t0 = at(0, name);
    const uint64_t rows = t0.shape[1];
    const size_t block = t0.shape[2] * t0.element_bytes();  // one row of one moe-tp rank
    std::map<uint64_t, HostTensor> down;
    for (uint64_t p = 0; p < e->map->size(); ++p) {
      const uint64_t x = static_cast<uint64_t>((*e->map)[p]);
      const bool first = !down.contains(x);
      if (first) {
        down[x] = HostTensor{t0.dtype,
                             {rows, t0.shape[2] * moe_tp_},
                             std::vector<std::byte>(rows * moe_tp_ * block)};
      }
      for (uint64_t rm = 0; rm < moe_tp_; ++rm) {
        const std::byte* slot = at((p / e->local) * moe_tp_ + rm, name).row(p % e->local);
        for (uint64_t h = 0; h < rows; ++h) {
          place(first, down[x].bytes.data() + (h * moe_tp_ + rm) * block, slot + h * block, block,
                name, x, p);
        }
      }
    }
    emit_experts(*e, name, e->down, down);
  }

  // Llama-4 as its checkpoint stores it (docs/families/llama4.md): each q/k head's rows back from
  // [even rows; odd rows] to interleaved pairs, and the per-expert [out, in] matrices rebuilt above
  // back into the fused [E, in, out] gate_up_proj (gate columns, then up) and down_proj.
  void llama4_checkpoint_order() {
    const uint64_t d = config_.head_dim;
    std::map<std::string, std::map<uint64_t, std::map<std::string, Rebuilt>>> experts;  // module -> x -> part
    for (auto it = out_.begin(); it != out_.end();) {
      const std::string& name = it->first;
      HostTensor& t = it->second.tensor;
      if (name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.k_proj.weight")) {
        HostTensor pairs = t;
        const size_t row = t.row_bytes();
        for (uint64_t r = 0; r < t.rows(); ++r) {
          const uint64_t head = r / d * d, i = r % d;
          const uint64_t from = head + (i % 2 == 0 ? i / 2 : d / 2 + i / 2);
          std::memcpy(pairs.bytes.data() + r * row, t.row(from), row);
        }
        t = std::move(pairs);
      }
      const size_t at = name.find("feed_forward.experts.");
      if (at == std::string::npos) {
        ++it;
        continue;
      }
      const std::string module = name.substr(0, at + std::string("feed_forward.experts.").size());
      std::string_view rest = std::string_view(name).substr(module.size());
      uint64_t x = 0;
      const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), x);
      if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.') {
        problems_.add("{}: not a per-expert name", name);
        ++it;
        continue;
      }
      experts[module][x][std::string(end + 1, rest.data() + rest.size())] = std::move(it->second);
      it = out_.erase(it);
    }
    for (auto& entry : experts) {
      const std::string& module = entry.first;  // clang 14 cannot capture structured bindings
      auto& by_expert = entry.second;
      const uint64_t count = by_expert.size();
      auto fused = [&](std::initializer_list<const char*> parts, const std::string& name) {
        const Rebuilt& first = by_expert.begin()->second.at(std::string(parts.begin()[0]) + ".weight");
        const HostTensor& p0 = first.tensor;
        const uint64_t out_rows = p0.shape[0], in = p0.shape[1], width = out_rows * parts.size();
        const size_t es = p0.element_bytes();
        HostTensor t{p0.dtype, {count, in, width}, std::vector<std::byte>(count * in * width * es)};
        for (auto& [x, by_part] : by_expert) {
          for (size_t k = 0; k < parts.size(); ++k) {
            const HostTensor& m = by_part.at(std::string(parts.begin()[k]) + ".weight").tensor;
            for (uint64_t o = 0; o < out_rows; ++o) {
              for (uint64_t i = 0; i < in; ++i) {
                std::memcpy(t.bytes.data() + ((x * in + i) * width + k * out_rows + o) * es,
                            m.bytes.data() + (o * in + i) * es, es);
              }
            }
          }
        }
        emit(module + name, std::move(t), first.from);
      };
      fused({"gate_proj", "up_proj"}, "gate_up_proj");
      fused({"down_proj"}, "down_proj");
    }
  }

  // Gemma 4 as its checkpoint stores its experts (docs/families/gemma4.md): the per-expert [out, in]
  // matrices rebuilt above back into experts.gate_up_proj [E, 2 Im, H] (each expert's gate rows, then
  // its up rows: not transposed) and experts.down_proj [E, H, Im].
  void gemma4_checkpoint_order() {
    std::map<std::string, std::map<uint64_t, std::map<std::string, Rebuilt>>> experts;  // module -> x -> part
    for (auto it = out_.begin(); it != out_.end();) {
      const std::string& name = it->first;
      const size_t at = name.find(".experts.");
      if (layer_of(name) < 0 || at == std::string::npos) {
        ++it;
        continue;
      }
      const std::string module = name.substr(0, at + std::string(".experts.").size());
      std::string_view rest = std::string_view(name).substr(module.size());
      uint64_t x = 0;
      const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), x);
      if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.') {
        problems_.add("{}: not a per-expert name", name);
        ++it;
        continue;
      }
      experts[module][x][std::string(end + 1, rest.data() + rest.size())] = std::move(it->second);
      it = out_.erase(it);
    }
    for (auto& entry : experts) {
      const std::string& module = entry.first;
      auto& by_expert = entry.second;
      auto stacked = [&](std::initializer_list<const char*> parts, const std::string& name) {
        std::vector<HostTensor> rows;
        std::string from;
        for (auto& [x, by_part] : by_expert) {
          for (const char* part : parts) {
            const Rebuilt& m = by_part.at(std::string(part) + ".weight");
            rows.push_back(m.tensor);
            from = m.from;
          }
        }
        HostTensor t = internal::concat_rows(rows);
        const uint64_t count = by_expert.size(), per_expert = t.rows() / count;
        t.shape = {count, per_expert, t.shape[1]};
        emit(module + name, std::move(t), from);
      };
      stacked({"gate_proj", "up_proj"}, "gate_up_proj");
      stacked({"down_proj"}, "down_proj");
    }
  }

  const ExportContents& ex_;
  Problems& problems_;
  ConfigView config_;
  uint64_t tp_ = 1;
  uint64_t ep_ = 1;
  uint64_t moe_tp_ = 1;
  bool divided_ = false;
  bool split_shared_ = true;
  std::optional<DType> dtype_;
  std::vector<std::vector<int>> map_;
  std::vector<int> moe_layers_;
  std::set<std::pair<std::string, uint64_t>> reported_;  // (tensor, physical expert) seen differing
  RebuiltCheckpoint out_;
};

inline RebuiltCheckpoint reassemble(const ExportContents& contents, Problems& problems) {
  return Reassembler(contents, problems).run();
}

}  // namespace shardload::testing
