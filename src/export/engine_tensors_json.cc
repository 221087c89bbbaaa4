#include "export/engine_tensors.h"

namespace shardload {

nlohmann::json engine_tensors_json(const Plan& plan, const RankPlan& rank, Engine engine) {
  nlohmann::json out = nlohmann::json::array();
  for (const EngineTensor& t : engine_tensors(plan, rank, engine)) {
    nlohmann::json entry = {{"name", t.name},          {"dtype", dtype_name(t.dtype)},
                            {"shape", t.shape},        {"source", nullptr},
                            {"source_shape", nullptr}, {"source_dtype", nullptr},
                            {"fill", t.fill}};
    if (t.param != nullptr) {
      entry["source"] = t.param->name;
      entry["source_shape"] = t.param->shape;
      entry["source_dtype"] = dtype_name(t.param->dtype);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace shardload
