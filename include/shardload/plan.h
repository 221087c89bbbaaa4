#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardload/checkpoint.h"
#include "shardload/dtype.h"
#include "shardload/model.h"
#include "shardload/tensor.h"
#include "shardload/weight_format.h"

namespace shardload {

enum class RowBias {
  kFull,     // vLLM / SGLang: the full bias on every rank
  kDivided,  // FastDeploy tp_row_bias: bias / T on every rank, divided in float32, then cast
};

// The group of ranks that splits a parameter group: all T ranks (index G), the attention group of
// A = T / D ranks (index G % A), or none (the tensor whole, vocab tables padded as at tp 1).
enum class Scope { kWorld, kAttention, kReplicated };

// Whose data-parallel layout --dp means: SGLang's DP attention (attention in the attention scope,
// embeddings replicated, dense MLP, lm_head and shared experts over the world), or vLLM's DP replicas
// (every non-expert group in the attention scope).
enum class DpStyle { kSglang, kVllm };

// Each layout choice with its name, in one table for the command line, the Python package, plans,
// exports and the weight server's manifest (src/shard/layout_names.cc reads them both ways).
inline constexpr std::pair<RowBias, const char*> kRowBiasNames[] = {{RowBias::kFull, "full"},
                                                                    {RowBias::kDivided, "divided"}};
inline constexpr std::pair<Scope, const char*> kScopeNames[] = {
    {Scope::kWorld, "world"}, {Scope::kAttention, "attention"}, {Scope::kReplicated, "replicated"}};
inline constexpr std::pair<DpStyle, const char*> kDpStyleNames[] = {{DpStyle::kSglang, "sglang"},
                                                                    {DpStyle::kVllm, "vllm"}};

std::string_view row_bias_name(RowBias row_bias);
std::string_view scope_name(Scope scope);
std::string_view dp_style_name(DpStyle style);
// The value a name stands for; nullopt for a name not in its table.
std::optional<RowBias> row_bias_from_name(std::string_view name);
std::optional<Scope> scope_from_name(std::string_view name);
std::optional<DpStyle> dp_style_from_name(std::string_view name);
// A table's names, e.g. for a command-line choice: {"full", "divided"}.
template <typename T, size_t N>
std::vector<std::string> names_of(const std::pair<T, const char*> (&table)[N]) {
  std::vector<std::string> out;
  for (const auto& entry : table) out.emplace_back(entry.second);
  return out;
}

// The size of the group of ranks that splits a parameter, and one rank's index in it.
struct SplitGroup {
  uint64_t size = 1;
  uint64_t index = 0;
};

// The layout of a deployment, spelled as vLLM and SGLang spell it (--tensor-parallel-size, ...).
struct ParallelConfig {
  int tp = 1;  // the world size T (SGLang's --tp-size)
  int ep = 1;
  int dp = 1;  // attention data-parallel size D (divides T); A = T / D ranks split attention
  DpStyle dp_style = DpStyle::kSglang;
  bool dp_lm_head = false;           // --enable-dp-lm-head: lm_head in the attention scope
  bool replicate_dense_mlp = false;  // --moe-dense-tp-size 1: dense MLPs whole on every rank
  std::optional<int> redundant_experts;  // unset: 0, or P - E when an expert map is given
  // physical_to_logical_map, one row per MoE layer (--expert-map FILE); empty: the default p -> p % E.
  std::vector<std::vector<int>> expert_map;
  RowBias row_bias = RowBias::kFull;
  bool split_shared_experts = true;  // false: --no-split-shared-experts (replicated whole)
  std::optional<DType> dtype;        // unset: --dtype auto (config torch_dtype)
  bool quantize_fp8 = false;         // --quantization fp8: dynamic FP8 for a bf16/fp16/fp32 checkpoint

  int attention_tp() const { return dp > 0 ? tp / dp : tp; }  // A
  int dp_rank(int rank) const { return rank / attention_tp(); }
  int attention_rank(int rank) const { return rank % attention_tp(); }
  // Which ranks split a non-expert group under this layout (kExperts: kWorld; their EP x MoE-TP cut
  // is split_group's).
  Scope scope(ParamGroup group) const;
  // The ranks that split `group` and `rank`'s index among them (experts: the T / EP ranks of one EP
  // rank).
  SplitGroup split_group(ParamGroup group, int rank) const;
  // Whether the layout differs from the plain one by its data-parallel fields (--dp > 1 or a group's
  // scope moved): then exports and manifests carry dp_size, dp_style and scopes.
  bool has_dp_fields() const;
};

// The engines' flags that set several layout fields at once: vLLM's --enable-expert-parallel (ep = tp),
// SGLang's --moe-a2a-backend deepep (ep = tp, shared experts replicated) and --moe-dense-tp-size (1:
// dense MLPs replicated; tp: as without it).
struct EngineLayoutFlags {
  bool enable_expert_parallel = false;
  std::string moe_a2a_backend = "none";
  std::optional<int> moe_dense_tp_size;
  bool ep_given = false;  // the caller set ep itself: it must then agree with the flags
};

// Applies the flags to `config` (its tp set). Throws Error(kInvalidArgument) when they disagree with it.
void apply_engine_flags(const EngineLayoutFlags& flags, ParallelConfig& config);

// The groups that have a scope, in the order exports list them.
inline constexpr ParamGroup kScopedGroups[] = {ParamGroup::kAttention, ParamGroup::kEmbedding,
                                               ParamGroup::kLmHead, ParamGroup::kDenseMlp,
                                               ParamGroup::kSharedExperts};

// {group: scope} for every group with a scope ("attention": "attention", "embedding": "replicated", ...),
// as plans, exports and the weight server's manifest give it.
nlohmann::json scopes_json(const ParallelConfig& parallel);

// Reads {"physical_to_logical_map": [[...], ...]}. Throws Error(kInvalidArgument) naming the file.
std::vector<std::vector<int>> read_expert_map(const std::string& path);
// The same from the file's text; `source` names it in errors.
std::vector<std::vector<int>> parse_expert_map_text(std::string_view text,
                                                    const std::string& source);

// The map itself, [[...], ...]: a list of rows of expert indices (`file` only names the source in errors,
// e.g. an expert-map file, a request or a manifest). Throws Error(kInvalidArgument).
std::vector<std::vector<int>> parse_expert_map(const nlohmann::json& rows, const std::string& file = {});

// Checks a physical_to_logical map against a model: one row per MoE layer, all rows as long (at
// least one slot per logical expert), every entry a logical expert, every expert placed in every
// row; with `redundant_experts` given, that many slots more than experts. Returns the slots per
// layer. Throws Error(kInvalidArgument). validate_layout runs it on ParallelConfig::expert_map.
uint64_t validate_expert_map(const ModelConfig& model, const std::vector<std::vector<int>>& map,
                             std::optional<int> redundant_experts = {});

// Checks a layout against a model before any I/O. Throws Error(kInvalidArgument) with messages such as
// "tp=3 does not divide 16 attention heads".
void validate_layout(const ModelConfig& model, const ParallelConfig& parallel);

// A checkpoint tensor the plan reads from, viewed as a matrix [rows, cols] (1-D tensors are [n, 1]).
struct PlanSource {
  std::string name;
  size_t file = 0;           // index into Checkpoint::files()
  uint64_t file_offset = 0;  // absolute offset of its first byte in that file
  DType dtype = DType::kBF16;
  Shape shape;
  uint64_t rows = 0;
  uint64_t cols = 0;
  // A stacked source (one tensor [E, ...] for every expert, Llama-4's fused experts): its rows per
  // expert, expert x's at [x * expert_rows, ...); 0 for a tensor of one expert or none.
  uint64_t expert_rows = 0;
};

// One block copy: source rows [row_begin, row_end) x cols [col_begin, col_end) land as a dense
// [rows, cols] block at dst_offset bytes from the start of the rank tensor, converted to its dtype
// (transposed: as a dense [cols, rows] block, for checkpoints that store a matrix [in, out]), or, with a
// destination pitch, as `rows` rows of `cols` values dst_pitch values apart: a column block of a wider
// rank tensor (K-first formats, whose fused parts sit side by side along the columns).
// When the block spans all source columns it is one contiguous source run; otherwise one run per row.
struct PlanPiece {
  uint32_t source = 0;
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
  uint64_t col_begin = 0;
  uint64_t col_end = 0;
  uint64_t dst_offset = 0;
  uint32_t divisor = 1;  // row-parallel bias with --row-bias divided: value / T in float32
  bool transposed = false;
  uint64_t dst_pitch = 0;  // values from one destination row to the next; 0: cols() (dense)

  uint64_t rows() const { return row_end - row_begin; }
  uint64_t cols() const { return col_end - col_begin; }
  // Values from one destination row to the next (not for transposed pieces).
  uint64_t dst_row_values() const { return dst_pitch != 0 ? dst_pitch : cols(); }
  // Values from the first destination value to one past the last (bytes: times the rank dtype's size).
  uint64_t dst_span_values() const { return rows() == 0 ? 0 : (rows() - 1) * dst_row_values() + cols(); }
};

struct PlanModule {
  std::string name;  // its rule's target: its main parameter's name, but a packed format's (X.weight_packed)
  PostProcess post = PostProcess::kNone;
  std::vector<uint64_t> part_rows;  // rows of each fused part within one slot of the weight
  // Routed-expert modules: the row of Plan::physical_to_logical that places their slots (the MoE
  // layer's index among MoE layers); -1 for every other module. Lets expert slots be named and
  // moved without parsing tensor names.
  int moe_layer = -1;
  ParamGroup group = ParamGroup::kReplicated;  // the group its rule belongs to (scales follow it)
  bool checks_scales = false;  // a quantized module whose checkpoint scales are checked when read
  // Whether the module has anything to do after its tensors arrived.
  bool needs_postprocess() const { return post != PostProcess::kNone || checks_scales; }
};

// A rank tensor: its name, dtype and shape as docs/layout.md gives them, its place in the rank's
// allocation, and the pieces that fill it. Bytes no piece covers (vocab padding) are zero.
struct PlanParam {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
  uint64_t offset = 0;  // in the rank allocation, aligned to kParamAlignment
  uint64_t nbytes = 0;
  std::vector<PlanPiece> pieces;
  bool has_padding = false;  // some bytes are zero fill
  uint32_t module = 0;  // index into Plan::modules
  ParamRole role = ParamRole::kData;
  bool exported() const {
    return role == ParamRole::kData || role == ParamRole::kWeightScale || role == ParamRole::kInputScale ||
           role == ParamRole::kWeightAux;
  }
};

struct RankPlan {
  int rank = 0;
  int ep_rank = 0;
  int moe_tp_rank = 0;
  int dp_rank = 0;         // G / A
  int attention_rank = 0;  // G % A
  std::vector<PlanParam> params;
  uint64_t bytes = 0;       // size of the rank allocation
  uint64_t read_bytes = 0;  // checkpoint bytes this rank reads
};

inline constexpr uint64_t kParamAlignment = 256;

struct Plan {
  ModelConfig model;
  ParallelConfig parallel;
  int moe_tp = 1;            // T / EP
  int physical_experts = 0;  // P = E + R
  DType dtype = DType::kBF16;
  std::vector<std::vector<int>> physical_to_logical;  // one row per MoE layer, in layer order
  std::vector<PlanSource> sources;
  std::vector<std::string> skipped;  // checkpoint tensors skipped by a stated rule
  Quantization quantization = Quantization::kNone;  // of the loaded weights
  WeightFormat format;                               // theirs, as data (weight_format.h)
  std::vector<PlanModule> modules;                   // the same on every rank
  std::vector<RankPlan> ranks;

  nlohmann::json to_json(bool with_pieces = true) const;
};

// Plans every rank of the layout: validates the layout, matches every checkpoint tensor to the architecture's
// table (an unknown, missing or mis-shaped tensor is an Error naming it) and places each rank tensor.
Plan make_plan(const Checkpoint& checkpoint, const ParallelConfig& parallel);

}  // namespace shardload
