// AWQ (quant_method "awq": AutoAWQ's GEMM format, llm-awq; docs/layout.md "AWQ"): int4 weights stored
// input-major and packed along N, qweight [K, N / 8] (word c of a row holds outputs 8c + [0, 2, 4, 6, 1, 3, 5,
// 7][j] in nibble j), a scale per group of g inputs and output column, scales [K / g, N], and zero points
// packed the same way, qzeros [K / g, N / 8]. The rank tensors are those vLLM 0.33's AWQ methods hold before
// post-processing (AutoAWQMarlinLinearMethod, its CPU one too, and AutoAWQMoEMethod): input-major and packed
// along N as stored, so cuts of N fall on whole words and the nibble order never crosses a rank.
#include <fmt/format.h>

#include "core/json_input.h"
#include "model/quant/quantization_config.h"

namespace shardload {
namespace {

using json = nlohmann::json;

// The first of `fields` present and not null (AutoAWQ's w_bit / q_group_size, transformers' bits /
// group_size).
const json* awq_field(const json& q, std::initializer_list<const char*> fields, std::string& name) {
  for (const char* field : fields) {
    const auto it = q.find(field);
    if (it != q.end() && !it->is_null()) {
      name = field;
      return &*it;
    }
  }
  name = *fields.begin();
  return nullptr;
}

}  // namespace

void read_awq(const json& q, ModelConfig& m) {
  std::string field;
  const json* bits = awq_field(q, {"bits", "w_bit"}, field);
  if (bits == nullptr || *bits != 4) {
    throw quant_error("AWQ weights of 4 bits are loaded (vLLM 0.33's AWQ methods take no other)", field, "4",
                      bits == nullptr ? "(missing)" : brief_json(*bits));
  }
  // vLLM sizes a row-parallel layer's zero points by K_r / K groups for group_size -1: none. A group larger
  // than any dimension makes no sense.
  constexpr int64_t kMaxGroup = int64_t{1} << 20;
  const json* group = awq_field(q, {"group_size", "q_group_size"}, field);
  if (group == nullptr || !group->is_number_integer() || group->get<int64_t>() <= 0 ||
      group->get<int64_t>() > kMaxGroup) {
    throw quant_error("not an AWQ group size", field, fmt::format("1-{}", kMaxGroup),
                      group == nullptr ? "(missing)" : brief_json(*group));
  }
  const json* zero = awq_field(q, {"zero_point"}, field);
  if (zero == nullptr || !zero->is_boolean()) {
    throw quant_error("not a boolean", "zero_point", "true or false", zero == nullptr ? "(missing)" : brief_json(*zero));
  }
  // GEMV and the other kernels' formats pack words otherwise.
  if (const json* version = awq_field(q, {"version"}, field); version != nullptr && *version != "gemm" &&
                                                              *version != "GEMM") {
    throw quant_error("only AWQ's GEMM format is loaded", "version", "gemm", brief_json(*version));
  }
  if (const json* lm_head = awq_field(q, {"lm_head"}, field); lm_head != nullptr && *lm_head == true) {
    throw quant_error("an AWQ-quantized lm_head is not loaded", "lm_head", "false", "true");
  }
  m.quant_format = QuantFormat::kAwq;
  m.quantization = Quantization::kAwq;
  m.weight_strategy = WeightStrategy::kGroup;
  m.weight_bits = 4;
  m.group_size = group->get<uint64_t>();
  m.zero_points = zero->get<bool>();
}

WeightFormat awq_format(const ModelConfig& m) {
  WeightFormat format;
  format.quantization = Quantization::kAwq;
  format.scheme = fmt::format("awq int4 group {} {}", m.group_size, m.zero_points ? "zero points" : "symmetric");
  format.checkpoint_dtype = DType::kI32;
  format.rank_dtype = DType::kI32;
  format.weight_suffix = "qweight";
  format.pack_factor = 8;
  format.packs_outputs = true;
  format.k_first = true;
  format.block_rows = 1;
  format.block_cols = m.group_size;
  // The layers quantized are those with a qweight (vLLM reads modules_to_not_convert from the tensors' dtypes
  // where the config has none).
  format.quantized_where_stored = true;
  format.vllm_module_list = WeightFormat::EngineModuleList::kUnquantized;
  format.vllm_module_field = "modules_to_not_convert";
  format.family_name = "AWQ int4";
  format.block_name = fmt::format("{}-value groups", m.group_size);

  CompanionTensor scale;  // fields one by one: designated initializers would have to name every field (-Wextra)
  scale.checkpoint_suffix = scale.rank_suffix = "scales";
  scale.dtype = scale.expert_dtype = CompanionDtype::kModel;
  format.companions.push_back(scale);
  // [K / g, N / 8]: in the [N, K] view a grid whose blocks are 8 columns of N by a group.
  CompanionTensor zero;
  zero.checkpoint_suffix = zero.rank_suffix = "qzeros";
  zero.role = ParamRole::kWeightAux;
  zero.dtype = zero.expert_dtype = CompanionDtype::kStored;
  zero.stored_dtype = DType::kI32;
  zero.block_rows = format.pack_factor;
  zero.block_cols = m.group_size;
  format.companions.push_back(zero);
  format.checks_scales = true;  // every scale read is checked (in its model dtype)
  return format;
}

}  // namespace shardload
