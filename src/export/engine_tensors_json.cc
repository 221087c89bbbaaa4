#include "export/engine_tensors.h"

namespace shardload {

nlohmann::json engine_tensors_json(const Plan& plan, const RankPlan& rank, Engine engine) {
  nlohmann::json out = nlohmann::json::array();
  auto entry_of = [](const EngineTensor& t, const PlanParam* source, Shape shape) {
    nlohmann::json entry = {{"name", t.name},          {"dtype", dtype_name(t.dtype)},
                            {"shape", std::move(shape)}, {"source", nullptr},
                            {"source_shape", nullptr}, {"source_dtype", nullptr},
                            {"fill", t.fill},          {"rows", nullptr}};
    if (source != nullptr) {
      entry["source"] = source->name;
      entry["source_shape"] = source->shape;
      entry["source_dtype"] = dtype_name(source->dtype);
    }
    return entry;
  };
  for (const EngineTensor& t : engine_tensors(plan, rank, engine)) {
    if (t.rows_after == nullptr) {
      out.push_back(entry_of(t, t.param, t.shape));
      continue;
    }
    // One entry per part, each the rows of the engine's tensor it fills.
    uint64_t first_row = 0;
    for (const PlanParam* part : {t.param, t.rows_after}) {
      Shape shape = t.shape;
      shape[0] = part->shape[0];
      nlohmann::json entry = entry_of(t, part, shape);
      entry["rows"] = {first_row, part->shape[0]};
      first_row += part->shape[0];
      out.push_back(std::move(entry));
    }
  }
  return out;
}

}  // namespace shardload
