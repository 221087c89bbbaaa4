#include "shardload/eplb.h"

#include <nlohmann/json.hpp>

namespace shardload {

nlohmann::json to_json(const EplbResult& result) {
  return {{"physical_to_logical_map", result.physical_to_logical_map},
          {"logical_to_physical_map", result.logical_to_physical_map},
          {"logical_count", result.logical_count}};
}

}  // namespace shardload
