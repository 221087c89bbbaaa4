// GPTQ (quant_method "gptq": AutoGPTQ, GPTQModel, Qwen's official GPTQ-Int4; docs/layout.md "GPTQ"):
// integer weights packed along K into int32 words and stored input-major, qweight [K / pack, N], a scale
// per group of g inputs and output column, scales [K / g, N] (one group, [1, N], for g = -1), and zero
// points packed along N, qzeros [K / g, N / pack]. The rank tensors are those vLLM 0.33's AutoGPTQ
// methods hold before post-processing (its linear method and, for experts, its MoE method's
// w13_qweight [E_l, H / pack, 2 I_r]): input-major too, so the planner lays each part down as a column
// block (WeightFormat::k_first). vLLM drops g_idx (activation reordering is refused, as vLLM 0.33 does)
// and loads symmetric 4- and 8-bit weights only.
#include <fmt/format.h>

#include "core/json_input.h"
#include "model/quant/quantization_config.h"

namespace shardload {
namespace {

using json = nlohmann::json;

const json* field_of(const json& q, const char* field) {
  const auto it = q.find(field);
  return it == q.end() || it->is_null() ? nullptr : &*it;
}

bool gptq_bool(const json& q, const char* field, bool fallback) {
  const json* v = field_of(q, field);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw quant_error("not a boolean", field, "true or false", brief_json(*v));
  return v->get<bool>();
}

}  // namespace

void read_gptq(const json& q, ModelConfig& m) {
  const json* bits = field_of(q, "bits");
  if (bits == nullptr || !bits->is_number_integer() || (*bits != 4 && *bits != 8)) {
    throw quant_error("GPTQ weights of 4 or 8 bits are loaded (vLLM 0.33's GPTQ methods take no other)", "bits",
                      "4 or 8", bits == nullptr ? "(missing)" : brief_json(*bits));
  }
  // A group larger than any dimension makes no sense; -1 is one group for all inputs (per channel).
  constexpr int64_t kMaxGroup = int64_t{1} << 20;
  const json* group = field_of(q, "group_size");
  if (group == nullptr || !group->is_number_integer() ||
      (*group != -1 && (group->get<int64_t>() <= 0 || group->get<int64_t>() > kMaxGroup))) {
    throw quant_error("not a group size", "group_size", fmt::format("-1 or 1-{}", kMaxGroup),
                      group == nullptr ? "(missing)" : brief_json(*group));
  }
  const int64_t group_size = group->get<int64_t>();
  // vLLM 0.33 refuses activation reordering (normalize_and_validate_gptq_desc_act): no engine layout to
  // match. With one group per row it is a no-op, as vLLM says.
  if (gptq_bool(q, "desc_act", false) && group_size != -1) {
    throw quant_error("GPTQ activation reordering (desc_act) is not loaded: vLLM 0.33 refuses it too", "desc_act",
                      "false (or group_size -1)", "true");
  }
  if (!gptq_bool(q, "sym", true)) {
    throw quant_error("asymmetric GPTQ weights are not loaded: vLLM 0.33's GPTQ methods take symmetric ones only",
                      "sym", "true", "false");
  }
  if (gptq_bool(q, "lm_head", false)) {
    throw quant_error("a GPTQ-quantized lm_head is not loaded", "lm_head", "false", "true");
  }
  if (const json* dynamic = field_of(q, "dynamic"); dynamic != nullptr && !(dynamic->is_object() && dynamic->empty())) {
    throw quant_error("per-module GPTQ overrides (dynamic) are not loaded", "dynamic", "null or {}",
                      brief_json(*dynamic));
  }
  if (const json* pack = field_of(q, "pack_dtype"); pack != nullptr && *pack != "int32") {
    throw quant_error("GPTQ words other than int32 are not loaded", "pack_dtype", "int32", brief_json(*pack));
  }
  for (const char* field : {"checkpoint_format", "format"}) {
    // v2 differs from v1 only in its zero points' offset, which symmetric weights do not use (copied as read).
    if (const json* f = field_of(q, field); f != nullptr && *f != "gptq" && *f != "gptq_v2") {
      throw quant_error("not a GPTQ checkpoint format", field, "gptq or gptq_v2", brief_json(*f));
    }
  }
  m.quant_format = QuantFormat::kGptq;
  m.quantization = Quantization::kGptq;
  m.weight_strategy = group_size == -1 ? WeightStrategy::kChannel : WeightStrategy::kGroup;
  m.weight_bits = bits->get<uint32_t>();
  m.group_size = group_size == -1 ? kWholeRow : static_cast<uint64_t>(group_size);
  m.zero_points = true;  // stored for every group (GPTQ v1 keeps zero - 1), copied as read
}

WeightFormat gptq_format(const ModelConfig& m) {
  const bool channel = m.group_size == kWholeRow;
  WeightFormat format;
  format.quantization = Quantization::kGptq;
  format.scheme = fmt::format("gptq int{} {} symmetric", m.weight_bits,
                              channel ? "channel" : fmt::format("group {}", m.group_size));
  format.checkpoint_dtype = DType::kI32;
  format.rank_dtype = DType::kI32;
  format.weight_suffix = "qweight";
  format.pack_factor = 32 / m.weight_bits;
  format.block_rows = 1;
  format.block_cols = m.group_size;  // kWholeRow: one scale a column for all inputs, never cut
  format.k_first = true;
  format.quantized_where_stored = true;
  format.vllm_module_list = WeightFormat::EngineModuleList::kQuantizedDense;
  format.vllm_module_field = "modules_in_block_to_quantize";
  format.unread_suffixes = {"g_idx"};
  format.family_name = fmt::format("GPTQ int{}", m.weight_bits);
  format.block_name = channel ? "rows" : fmt::format("{}-value groups", m.group_size);

  CompanionTensor scale;  // fields one by one: designated initializers would have to name every field (-Wextra)
  scale.checkpoint_suffix = scale.rank_suffix = "scales";
  scale.dtype = scale.expert_dtype = CompanionDtype::kModel;
  format.companions.push_back(scale);
  // [K / g, N / pack]: in the [N, K] view a grid whose blocks are pack columns of N by a group.
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
