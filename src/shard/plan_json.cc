#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shardload/plan.h"

namespace shardload {
namespace {

std::string_view role_name(ParamRole role) {
  switch (role) {
    case ParamRole::kData: return "data";
    case ParamRole::kWeightScale: return "weight_scale";
    case ParamRole::kInputScale: return "input_scale";
    case ParamRole::kWeightScaleParts: return "weight_scale_parts";
    case ParamRole::kInputScaleParts: return "input_scale_parts";
    case ParamRole::kDynamicSource: return "dynamic_source";
    case ParamRole::kWeightAux: return "weight_aux";
  }
  return "unknown";
}

std::string_view post_name(PostProcess post) {
  switch (post) {
    case PostProcess::kNone: return "none";
    case PostProcess::kFp8Requantize: return "fp8_requantize";
    case PostProcess::kFp8Quantize: return "fp8_quantize";
  }
  return "unknown";
}

}  // namespace

nlohmann::json scopes_json(const ParallelConfig& parallel) {
  nlohmann::json scopes = nlohmann::json::object();
  for (const ParamGroup group : kScopedGroups) {
    scopes[std::string(group_name(group))] = scope_name(parallel.scope(group));
  }
  return scopes;
}

nlohmann::json Plan::to_json(bool with_pieces) const {
  nlohmann::json out;
  out["architecture"] = model.architecture;
  out["family"] = family_name(model.family);
  out["tp_size"] = parallel.tp;
  out["ep_size"] = parallel.ep;
  out["moe_tp_size"] = moe_tp;
  out["row_bias"] = row_bias_name(parallel.row_bias);
  out["no_split_shared_experts"] = !parallel.split_shared_experts;
  out["dp_size"] = parallel.dp;
  out["attn_tp_size"] = parallel.attention_tp();
  out["dp_style"] = dp_style_name(parallel.dp_style);
  out["scopes"] = scopes_json(parallel);
  out["dtype"] = dtype_name(dtype);
  add_quantization_fields(out, model, quantization);
  out["physical_experts"] = physical_experts;
  out["physical_to_logical_map"] = physical_to_logical;
  out["skipped"] = skipped;
  out["ranks"] = nlohmann::json::array();
  for (const RankPlan& rank : ranks) {
    nlohmann::json r = {{"rank", rank.rank},
                        {"ep_rank", rank.ep_rank},
                        {"moe_tp_rank", rank.moe_tp_rank},
                        {"dp_rank", rank.dp_rank},
                        {"attn_tp_rank", rank.attention_rank},
                        {"bytes", rank.bytes},
                        {"read_bytes", rank.read_bytes},
                        {"params", nlohmann::json::array()}};
    for (const PlanParam& param : rank.params) {
      // Internal parameters (FP8 scale parts, a dynamic-FP8 float32 source) feed their module's
      // post-processing and are not exported; role and module say which is which.
      nlohmann::json p = {{"name", param.name},
                          {"dtype", dtype_name(param.dtype)},
                          {"shape", param.shape},
                          {"offset", param.offset},
                          {"bytes", param.nbytes},
                          {"role", role_name(param.role)},
                          {"exported", param.exported()}};
      if (param.module < modules.size()) {  // a plan assembled by hand may have no modules
        p["module"] = modules[param.module].name;
        p["post"] = post_name(modules[param.module].post);
        const ParamGroup group = modules[param.module].group;
        p["group"] = group_name(group);
        p["scope"] = scope_name(parallel.scope(group));
      }
      if (with_pieces) {
        p["pieces"] = nlohmann::json::array();
        for (const PlanPiece& piece : param.pieces) {
          const PlanSource& src = sources[piece.source];
          const uint64_t esize = dtype_bits(src.dtype) / 8;
          const bool contiguous = piece.col_begin == 0 && piece.col_end == src.cols;
          // The source byte runs: one when whole rows are taken, else one per row at the row stride.
          nlohmann::json runs = {
              {"file_offset", src.file_offset + (piece.row_begin * src.cols + piece.col_begin) * esize},
              {"bytes", contiguous ? piece.rows() * src.cols * esize : piece.cols() * esize},
              {"count", contiguous ? 1 : piece.rows()},
              {"stride", src.cols * esize}};
          nlohmann::json j = {{"source", src.name},
                              {"rows", {piece.row_begin, piece.row_end}},
                              {"cols", {piece.col_begin, piece.col_end}},
                              {"dst_offset", piece.dst_offset},
                              {"runs", runs}};
          if (src.dtype != param.dtype) {
            j["convert"] = fmt::format("{}->{}", dtype_name(src.dtype), dtype_name(param.dtype));
          }
          if (piece.divisor != 1) j["divisor"] = piece.divisor;
          if (piece.transposed) j["transposed"] = true;
          if (piece.dst_pitch != 0) j["dst_pitch"] = piece.dst_pitch;  // values between destination rows
          p["pieces"].push_back(std::move(j));
        }
      }
      r["params"].push_back(std::move(p));
    }
    out["ranks"].push_back(std::move(r));
  }
  return out;
}

}  // namespace shardload
