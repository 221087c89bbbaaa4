#pragma once

// Architectures as data: for each family, a table from Hugging Face checkpoint names to the engine's rank
// parameters and their split rules (docs/layout.md). The planner interprets the tables; adding an
// architecture means adding a file (src/model/arch/<family>.cc, with its table and the rest of its
// descriptor, family.h) and one line in registry.cc, not a code path.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/model.h"
#include "shardload/tensor.h"

namespace shardload::arch {

// How a source tensor, viewed as [rows, cols] ([n, 1] for vectors), is cut for one rank.
enum class Split {
  kReplicated,  // whole, on every rank
  kColumn,      // output rows in equal blocks over the group
  kRow,         // input columns in equal blocks over the group
  kVocab,       // rows padded to a multiple of kVocabPadding (shard/vocab_padding.h), zero past the vocabulary
  kKvHeads,     // kv heads in blocks, or one replicated head per rank when the group outnumbers them
  kRowBias,     // a row-parallel layer's bias: whole (--row-bias full) or divided by the group size
  kFirstRank,   // whole on the group's first rank, zero on the others (a bias added after a sum over them)
};

// Which ranks split a parameter: a rule belongs to a group, and the layout gives each group its scope
// (ParallelConfig::split_group). kExperts rules are 3-D [El, ...], cut by MoE tensor parallelism.
using Group = ParamGroup;

// When a rule applies, evaluated per model (and per layer for layer rules).
enum class When {
  kAlways,
  kUntiedHead,     // tie_word_embeddings is false
  kDenseMlpLayer,  // a layer without routed experts
  kMoeLayer,       // a layer with routed experts
  kMoeShared,      // a MoE layer of a model with a shared expert
  kQLora,          // MLA with q_lora_rank
  kNoQLora,        // MLA without q_lora_rank
  kAttentionBias,  // q/k/v/o biases
  kQkvBias,        // q/k/v biases (with attention_bias too)
  kMlpBias,
  // A MoE layer whose routed experts are kept in their own format as the checkpoint stores them
  // (ModelConfig::expert_format: gpt-oss's and DeepSeek-V4's MXFP4): the rules of their codes and scales.
  kStoredExperts,
  kLinearExperts,  // a MoE layer whose routed experts are linear weights like the others
  kLinearAttentionLayer,  // a layer with linear attention (ModelConfig::linear_layer)
  kFullAttentionLayer,    // a layer of a hybrid model with softmax attention
  kStackedExperts,     // a MoE layer whose routed experts are fused 3-D tensors (ModelConfig::stacked_experts)
  kPerExpertTensors,   // a MoE layer whose routed experts are one tensor each
};

enum class Keep {
  kModelDtype,  // cast to --dtype
  kFloat32,     // always float32 (q/k norms, expert score correction bias)
  kCheckpoint,  // the checkpoint's own dtype and bytes (MXFP4's U8 codes and scales): never cast or quantized
};

using ShapeFn = Shape (*)(const ModelConfig&);

// Which rows of a part's matrix it takes before its split: a fused [gate; up] checkpoint tensor feeds
// two parts, its first and its second half.
enum class Band { kAll, kFirstHalf, kSecondHalf };
// Rows [begin, begin + size) of a source.
struct RowRange {
  uint64_t begin = 0;
  uint64_t size = 0;
};
using RowRangeFn = RowRange (*)(const ModelConfig&);

// One checkpoint tensor feeding a parameter. Names are relative to "model.layers.{L}." in layer rules;
// "{E}" stands for the logical expert.
struct Part {
  std::string source;
  Split split;
  ShapeFn shape;  // the shape config.json implies (a stacked source: with its expert dimension)
  // Fused experts (Llama-4, gpt-oss): one checkpoint tensor [E, ...] holds every expert, and a slot
  // of logical expert x takes its [x] (no "{E}" in the name).
  bool stacked = false;
  // The checkpoint stores the matrix as [in, out] (Llama-4's and gpt-oss's fused experts): the rank
  // tensor holds it [out, in], and split rules and bands apply to that transposed view.
  bool transposed = false;
  Band band = Band::kAll;
  // Rows in interleaved rotary pairs per head of head_dim rows (Llama-4's q/k, rotated as complex
  // pairs): the rank takes each head's even rows, then its odd rows, as vLLM and SGLang permute them
  // for their half-split (NeoX) rotary kernel.
  bool rotary_pairs = false;
  // The split must cut its dimension on multiples of this (MXFP4: whole 32-value groups), which a
  // refusal calls cut_granule_name ("MXFP4 32-value groups").
  uint64_t cut_granule = 1;
  std::string_view cut_granule_name = "";
  // Set when the part is one row range of its source, split on its own (kReplicated or kColumn): a
  // tensor that concatenates differently split pieces along its rows, as Qwen3-Next's conv1d stacks
  // the q, k and v channels, each of which a rank takes its share of. Null: the whole source.
  RowRangeFn rows = nullptr;
  // kKvHeads: the KV heads the part's rows hold, where a layer's differ from num_key_value_heads
  // (Gemma 4's full-attention layers). Null: num_key_value_heads.
  uint64_t (*kv_heads)(const ModelConfig&) = nullptr;
};

// A family's own rule of which decoder layers hold a parameter (`layer` -1 for a model-level one),
// beside ParamRule::when: Gemma 4's sliding and full-attention layers, the layers that share an
// earlier layer's KV cache.
using LayerWhen = bool (*)(const ModelConfig&, int layer);

// A rank parameter: its parts are stacked along the first dimension in order (fused qkv, gate_up, ...).
struct ParamRule {
  std::string target;
  When when = When::kAlways;
  std::vector<Part> parts;
  Group group = Group::kReplicated;  // a rule that splits a part names its group
  Keep keep = Keep::kModelDtype;
  bool optional = false;  // absent from some checkpoints (e.g. ERNIE moe_statics): skipped then
  bool flatten = false;   // the rank tensor is 1-D (ERNIE's [1, E] bias becomes [E])
  LayerWhen in_layer = nullptr;  // null: every layer (or the model) `when` takes
  // Keep::kCheckpoint: the dtype the checkpoint stores the bytes in, which the rank keeps (gpt-oss's U8
  // MXFP4 codes and scales; DeepSeek-V4's I8 FP4 codes, F8_E8M0 scales and I32 hash-routing table).
  DType stored = DType::kU8;
  // Keep::kCheckpoint: the dtype the rank labels those bytes with where the engine's differs (the same
  // bytes, reinterpreted, never converted: vLLM's MoE parameters hold DeepSeek-V4's I8 FP4 codes and F8_E8M0
  // scales as uint8); nullopt: the stored dtype.
  std::optional<DType> rank_as = std::nullopt;
};

// Checkpoint tensors no parameter consumes, each by a stated rule.
struct SkipRule {
  std::string_view reason;
  bool (*matches)(std::string_view name, const ModelConfig& model);
};

struct ArchTable {
  std::vector<ParamRule> model;  // names outside the decoder layers
  std::vector<ParamRule> layer;  // names relative to "model.layers.{L}."
  std::vector<SkipRule> skips;
};

// The family's table (its descriptor's, family.h).
const ArchTable& table_for(const Family* family);

// Whether a rank parameter is a linear projection's weight, the tensors FP8 quantizes (layout.md "FP8"):
// every `*_proj` weight (qkv, o, gate_up, down, q_a, q_b, kv_a, kv_b, fused_qkv_a, shared experts) and the
// routed experts' w13 / w2, and DeepSeek-V3.2's indexer wq_b and wk. Never embeddings, lm_head, norms,
// routers, shared_expert_gate, biases or the indexer's weights_proj (BF16 in the engines), nor
// Qwen3-Next's linear_attn.in_proj_ba and Qwen3.5's in_proj_b / in_proj_a (BF16 in Qwen's FP8
// checkpoints) and conv1d.
bool is_linear_weight(std::string_view target);

// Building blocks the family tables share (src/model/arch/common.cc).
std::vector<ParamRule> embedding_rules();
std::vector<ParamRule> norm_rules();
std::vector<ParamRule> attention_rules(bool qk_norm);
std::vector<ParamRule> mla_rules();
std::vector<ParamRule> dense_mlp_rules();
// Routed experts of a MoE layer under `module` ("mlp." or Mixtral's "block_sparse_moe."), with the
// checkpoint's names for the gate, up and down projections of expert {E} and for the router.
std::vector<ParamRule> expert_rules(const std::string& module, const std::string& gate,
                                    const std::string& up, const std::string& down);
// A shared expert MLP under `name` ("mlp.shared_expert." or "mlp.shared_experts.").
std::vector<ParamRule> shared_expert_rules(const std::string& name);
std::vector<SkipRule> common_skips();
// The common skips and the layers at or past num_hidden_layers (DeepSeek-style multi-token prediction).
std::vector<SkipRule> skips_with_mtp_layers();

std::vector<ParamRule> concat(std::initializer_list<std::vector<ParamRule>> blocks);
// The decoder layer index of a text-model name "model.layers.N....", or -1.
long layer_index(std::string_view name);

}  // namespace shardload::arch
