#include "python/layout_kwargs.h"
#include "python/path_arg.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/torch_dtype.h"
#include "shardload/error.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

const std::set<std::string>& layout_keywords() {
  static const std::set<std::string> names = {
      "tp", "ep", "dp", "dp_style", "enable_dp_attention", "enable_dp_lm_head", "moe_dense_tp_size",
      "moe_a2a_backend", "enable_expert_parallel", "redundant_experts", "expert_map", "row_bias",
      "split_shared_experts", "dtype", "quantization"};
  return names;
}

[[noreturn]] void invalid(const std::string& field, const std::string& expected, const std::string& found) {
  throw Error(ErrorKind::kInvalidArgument, "not a layout value",
              {.field = field, .expected = expected, .found = found});
}

std::string choice(const py::kwargs& kw, const char* name, std::string fallback,
                   const std::vector<std::string>& allowed) {
  if (!kw.contains(name)) return fallback;
  const std::string value = py::cast<std::string>(kw[name]);
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  invalid(name, list, value);
}

}  // namespace

bool is_layout_keyword(const std::string& name) { return layout_keywords().count(name) > 0; }

ParallelConfig layout_from_kwargs(const py::kwargs& kw) {
  for (const auto& [key, value] : kw) {
    const std::string name = py::cast<std::string>(key);
    if (!is_layout_keyword(name)) throw py::type_error("unexpected layout keyword argument '" + name + "'");
  }
  ParallelConfig c;
  const auto get_int = [&](const char* name, int fallback) {
    return kw.contains(name) ? py::cast<int>(kw[name]) : fallback;
  };
  c.tp = get_int("tp", 1);
  c.ep = get_int("ep", 1);
  c.dp = get_int("dp", 1);
  c.dp_style = dp_style_from_name(choice(kw, "dp_style", "sglang", names_of(kDpStyleNames))).value();
  c.dp_lm_head = kw.contains("enable_dp_lm_head") && py::cast<bool>(kw["enable_dp_lm_head"]);
  if (kw.contains("redundant_experts") && !kw["redundant_experts"].is_none()) {
    c.redundant_experts = py::cast<int>(kw["redundant_experts"]);
  }
  if (kw.contains("expert_map") && !kw["expert_map"].is_none()) {
    const py::handle map = kw["expert_map"];
    const bool is_path = py::isinstance<py::str>(map) || py::hasattr(map, "__fspath__");
    c.expert_map = is_path ? read_expert_map(path_arg(map)) : py::cast<std::vector<std::vector<int>>>(map);
  }
  c.row_bias = row_bias_from_name(choice(kw, "row_bias", "full", names_of(kRowBiasNames))).value();
  c.split_shared_experts = !kw.contains("split_shared_experts") || py::cast<bool>(kw["split_shared_experts"]);
  const std::string dtype = kw.contains("dtype") ? py::cast<std::string>(kw["dtype"]) : "auto";
  if (dtype != "auto") {
    c.dtype = model_dtype_from_flag(dtype);
    if (!c.dtype) invalid("dtype", "auto, bfloat16 (bf16), float16 (fp16, half) or float32 (fp32, float)", dtype);
  }
  c.quantize_fp8 = choice(kw, "quantization", "none", {"none", "fp8"}) == "fp8";
  EngineLayoutFlags flags;
  flags.enable_expert_parallel = kw.contains("enable_expert_parallel") && py::cast<bool>(kw["enable_expert_parallel"]);
  flags.moe_a2a_backend = choice(kw, "moe_a2a_backend", "none", {"none", "deepep"});
  if (kw.contains("moe_dense_tp_size") && !kw["moe_dense_tp_size"].is_none()) {
    flags.moe_dense_tp_size = py::cast<int>(kw["moe_dense_tp_size"]);
  }
  flags.ep_given = kw.contains("ep");
  apply_engine_flags(flags, c);
  return c;
}

}  // namespace shardload::python
