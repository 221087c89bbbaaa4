#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/reload.h"

namespace shardload::serve {

// POST /update_weights_from_disk {model_path, weight_name_filter?, load_format?, revision?}; other
// members (SGLang sends flags such as flush_cache) are ignored. revision: with a model id, the
// branch, tag or commit hash of the local Hugging Face cache to read (resolve_model_path).
struct UpdateRequest {
  std::string model_path;
  WeightFilter filter;
  std::string revision;
};

// POST /rebalance: exactly one of {physical_to_logical_map} or {expert_load}.
struct RebalanceRequest {
  std::optional<std::vector<std::vector<int>>> physical_to_logical_map;
  std::optional<std::vector<std::vector<double>>> expert_load;
};

// The filter as a JSON object (manifest "sources"): {"substrings": [...], "regex": "...",
// "experts": [[layer, expert], ...]}, each member only when used.
nlohmann::json describe_filter(const WeightFilter& filter);

// Parse a request body. Throw Error(kInvalidArgument) naming the member for malformed JSON, a
// missing member or one of the wrong type, before anything changes.
UpdateRequest parse_update_request(std::string_view body);
RebalanceRequest parse_rebalance_request(std::string_view body);

}  // namespace shardload::serve
