#pragma once

// A quantization format as data (docs/layout.md "Quantization formats"): what a quantized linear weight
// [N, K] is in the checkpoint and on a rank, the tensors that go with it, and the post-processing that
// makes the rank's tensors from what was read. Each format is one file (src/model/quant/<format>.cc)
// that reads its quantization_config and writes this descriptor; the planner, post-processing and reload
// read the descriptor and never name a format.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/dtype.h"
#include "shardload/model.h"

namespace shardload {

// What a parameter holds within its module (the rule instance it belongs to, e.g. one layer's qkv_proj).
enum class ParamRole {
  kData,              // the weight, bias, norm, ...: exported
  kWeightScale,       // a weight's scales (weight_scale / weight_scale_inv): exported
  kInputScale,        // a static activation scale (input_scale): exported
  kWeightScaleParts,  // the checkpoint's per-part weight scales, [slots, parts] F32: internal
  kInputScaleParts,   // the checkpoint's per-part input scales, [slots, parts] F32: internal
  kDynamicSource,     // the unquantized weight in float32, quantized at load: internal
  kWeightAux,         // a quantized weight's other stored tensors (zero points, its shape): exported as read
};

// Post-processing of a module, run once after all its tensors arrived, in place (src/load/postprocess.cc).
enum class PostProcess {
  kNone,
  kFp8Requantize,  // per-part scalar scales: parts to the largest scale, merged weight and input scales
  kFp8Quantize,    // quantized at load: quantize the float32 source per slot
};

// How a tensor that goes with a quantized weight [N, K] is laid out, per fused part and expert.
enum class CompanionLayout {
  // A grid [ceil(N / block_rows), ceil(K / block_cols)] read from the checkpoint, cut with its weight on
  // whole blocks (a cut inside a block is refused); the rank tensor stacks the parts' cut grids.
  kBlockGrid,
  // One value per part read from the checkpoint: gathered into a [slots, parts] table (parts_role) that
  // post-processing merges into one value per slot (the rank tensor: [1], [slots] or [slots, 2]).
  kPartScalar,
  // No checkpoint tensor: post-processing computes one value per slot (the merged shape above).
  kMadeAtLoad,
  // One small tensor per part in the checkpoint (compressed-tensors' weight_shape [2]), never cut: the
  // rank holds one part's as it is, one per slot for experts ([slots, ...]): the part read last, as the
  // engines' loaders keep the last one they read, reading files in name order and each file's tensors
  // in name order (in one file: v_proj of q/k/v, up_proj of gate/up, q_a_proj of q_a/kv_a).
  kWholeLastNamed,
  // One value per part read from the checkpoint ([1] or []), every part's kept as read: the rank tensor
  // is the parts' table, [parts] for a dense layer, [slots, parts] for two-part experts (w13), [slots]
  // for one-part ones (w2) (NVFP4's global scales, which the engines merge after loading).
  kPartTable,
};

// A companion's dtype on a rank: float32, the plan's model dtype, or the checkpoint's own (codes
// copied as they are: zero points, shapes).
enum class CompanionDtype { kF32, kModel, kStored };

struct CompanionTensor {
  std::string checkpoint_suffix;  // "X.weight" -> "X.<suffix>" in the checkpoint; empty for kMadeAtLoad
  std::string rank_suffix;        // the rank tensor's name the same way
  CompanionLayout layout = CompanionLayout::kBlockGrid;
  ParamRole role = ParamRole::kWeightScale;
  ParamRole parts_role = ParamRole::kWeightScaleParts;  // kPartScalar: the table's role
  std::string parts_suffix;                             // kPartScalar: the table's name
  // kPartScalar, kMadeAtLoad: a two-part expert layer (w13) keeps one column per part ([slots, 2],
  // both equal) instead of [slots].
  bool merged_keeps_parts = false;
  CompanionDtype dtype = CompanionDtype::kF32;
  CompanionDtype expert_dtype = CompanionDtype::kF32;  // of routed experts' (vLLM keeps some apart)
  // The dtype the checkpoint must store it in, for companions kept as stored bytes (kStored).
  std::optional<DType> stored_dtype = std::nullopt;
  // Another dtype the checkpoint may store it in where the rank converts it (expert_dtype not
  // kStored): Kimi-K2.5's experts' weight_shape is int32, llm-compressor's int64.
  std::optional<DType> expert_alt_dtype = std::nullopt;
  // kBlockGrid: the grid's block, in values of the weight [N, K]; 0: the format's block_rows/cols
  // (zero points packed along N group pack_factor rows).
  uint64_t block_rows = 0;
  uint64_t block_cols = 0;
  // kPartTable of routed experts: one row per logical expert, every expert's on every rank, not one per
  // local slot (vLLM 0.33's ModelOpt NVFP4 MoE input scales under a FlashInfer backend, use_global_sf).
  // Such a table does not move when experts do.
  bool every_expert = false;
};

struct WeightFormat {
  Quantization quantization = Quantization::kNone;  // of the loaded weights (the manifest's spelling)
  // What an update must match (reload refuses another): the label and every parameter of the format,
  // e.g. "fp8-block blocks 128x128", "compressed-tensors (channel weights) blocks 1x0".
  std::string scheme;
  // The quantized weight's dtype in the checkpoint; nullopt: the model's floats, quantized at load
  // (read into a float32 twin that post-processing quantizes).
  std::optional<DType> checkpoint_dtype;
  DType rank_dtype = DType::kF8E4M3;
  uint64_t block_rows = 0;  // kBlockGrid companions
  uint64_t block_cols = 0;  // kWholeRow: one value per weight row
  // The quantized weight's name in the checkpoint and on a rank: "X.weight" -> "X.<weight_suffix>"
  // (compressed-tensors' packed integers: weight_packed).
  std::string weight_suffix = "weight";
  // Values per stored element along K (the weight's last dimension): 8 int4 values in an int32 word.
  // The checkpoint's weight is [N, K / pack_factor]; cuts of K fall on whole words.
  uint64_t pack_factor = 1;
  std::vector<CompanionTensor> companions;  // in the order the rank tensors follow the weight
  PostProcess post = PostProcess::kNone;
  // Scales read from the checkpoint are checked (positive, finite) whenever they are read, including
  // formats with nothing else to post-process.
  bool checks_scales = false;
  // The checkpoint stores the weight and its block grids input-major, [K / pack_factor, N] and [K / g, N]
  // (GPTQ), and the ranks keep them so: a tensor's parts (q/k/v, gate/up) sit side by side along its
  // columns, each a column block of it. The planner cuts the [N, K] matrix as for any format and lays
  // each block down transposed in place (PlanPiece::dst_pitch).
  bool k_first = false;
  // The words pack pack_factor values along N, not K (AWQ): the checkpoint's weight is [K, N / pack_factor]
  // (k_first), and cuts of N fall on whole words.
  bool packs_outputs = false;
  // A layer is quantized where the checkpoint holds its weight_suffix tensor, as the engines decide from
  // the tensors' dtypes (GPTQ names no modules); without a checkpoint, every linear layer is.
  bool quantized_where_stored = false;
  // Checkpoint tensors of a quantized layer that no rank holds ("X.<suffix>"): GPTQ's g_idx, which the
  // engines drop (activation reordering is refused by the config reader).
  std::vector<std::string> unread_suffixes;
  // What vLLM's reading of the format needs in an export's quantization_config to find the quantized layers,
  // which it otherwise decides from the tensor names of the directory it loads (an export's fused names match
  // none of its parts'): the quantized dense modules (GPTQ's modules_in_block_to_quantize), or every module
  // holding no quantized weight (AWQ's modules_to_not_convert). Empty: nothing to write.
  enum class EngineModuleList { kNone, kQuantizedDense, kUnquantized };
  EngineModuleList vllm_module_list = EngineModuleList::kNone;
  std::string vllm_module_field;
  // The name a refusal uses for the format: "FP8", "W4A16".
  std::string family_name = "FP8";
  // What a block of the scale grid is called in a refusal: "blocks", "32-value groups".
  std::string block_name = "blocks";

  bool quantizes() const { return quantization != Quantization::kNone; }
  bool quantized_at_load() const { return quantizes() && !checkpoint_dtype; }
  bool scales_per_row() const { return block_cols == kWholeRow; }
  // Whether a module's input scale is one merged value (per-tensor FP8's: the parts' maximum, recomputed
  // when experts move) rather than per-slot values that move with their experts (NVFP4's global scales).
  bool merges_input_scale() const {
    for (const CompanionTensor& c : companions) {
      if (c.role == ParamRole::kInputScale && c.layout == CompanionLayout::kPartScalar) return true;
    }
    return false;
  }
  // Whether a routed-expert rank tensor named `name` is a table of every logical expert
  // (CompanionTensor::every_expert), the same under any placement.
  bool every_expert_table(std::string_view name) const {
    for (const CompanionTensor& c : companions) {
      if (c.every_expert && name.ends_with("_" + c.rank_suffix)) return true;
    }
    return false;
  }
};

// The format of a checkpoint's linear weights as config.json gives it, or, for `quantize_at_load` (the
// --quantization option) on an unquantized one, the format they are quantized to.
WeightFormat weight_format(const ModelConfig& model, bool quantize_at_load);

// A format the routed experts keep as the checkpoint stores them, beside the linear weights' WeightFormat
// (MXFP4: src/model/quant/mxfp4.cc): codes and scales copied as their bytes (arch::Keep::kCheckpoint),
// never cast or quantized, and cut only on whole groups. The format's reader (or the family, where its
// config.json says so elsewhere) points ModelConfig::expert_format at it; the planner then takes the
// family's rules for stored experts (arch::When::kStoredExperts) instead of its linear ones, and the
// families size those rules from it. Nothing else names the format.
struct ExpertFormat {
  std::string_view name;           // "MXFP4"
  uint64_t group = 1;              // values per scale
  uint64_t values_per_byte = 1;    // codes in a stored byte
  DType scale_dtype = DType::kU8;  // the scales' dtype as the format defines it (a checkpoint may say U8)
  std::string_view groups_name;    // what a cut that splits a group misses: "MXFP4 32-value groups"

  uint64_t group_bytes() const { return group / values_per_byte; }  // bytes of codes per group
};

}  // namespace shardload
