#include "serve/requests.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "eplb/expert_load_json.h"
#include "shardload/eplb.h"
#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload::serve {
namespace {

// How much of a bad request member an answer quotes: more than brief_json's default, so that a
// client sees enough of a path or a map row to find it.
constexpr size_t kBriefMemberBytes = 80;

Error bad_member(const char* member, std::string expected, const nlohmann::json& found) {
  return Error(ErrorKind::kInvalidArgument, "bad request member",
               {.field = member, .expected = std::move(expected), .found = brief_json(found, kBriefMemberBytes)});
}

nlohmann::json parse_object(std::string_view body) {
  nlohmann::json json =
      parse_json(body, ErrorKind::kInvalidArgument, "request body", kRequestJsonLimits);
  if (!json.is_object()) throw bad_member("(body)", "a JSON object", json);
  return json;
}

// A member that is absent or null counts as not given (clients often send null for defaults).
const nlohmann::json* optional_member(const nlohmann::json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

nlohmann::json describe_filter(const WeightFilter& filter) {
  nlohmann::json out = nlohmann::json::object();
  if (!filter.substrings.empty()) out["substrings"] = filter.substrings;
  if (!filter.regex.empty()) out["regex"] = filter.regex;
  if (!filter.experts.empty()) {
    nlohmann::json experts = nlohmann::json::array();
    for (const auto& [layer, expert] : filter.experts) experts.push_back({layer, expert});
    out["experts"] = std::move(experts);
  }
  return out;
}

UpdateRequest parse_update_request(std::string_view body) {
  const nlohmann::json json = parse_object(body);
  UpdateRequest request;
  const auto path = json.find("model_path");
  if (path == json.end() || !path->is_string() || path->get_ref<const std::string&>().empty()) {
    throw bad_member("model_path", "a non-empty string",
                     path == json.end() ? nlohmann::json("(missing)") : *path);
  }
  request.model_path = path->get<std::string>();
  if (const nlohmann::json* filter = optional_member(json, "weight_name_filter")) {
    if (!filter->is_array()) throw bad_member("weight_name_filter", "a list of strings", *filter);
    for (const nlohmann::json& item : *filter) {
      if (!item.is_string() || item.get_ref<const std::string&>().empty()) {
        throw bad_member("weight_name_filter", "a list of non-empty strings", item);
      }
      request.filter.substrings.push_back(item.get<std::string>());
    }
    // An empty list would select every tensor: surely not what a client that sent a filter meant.
    if (request.filter.substrings.empty()) {
      throw bad_member("weight_name_filter",
                       "at least one substring (omit it to update everything)", *filter);
    }
  }
  if (const nlohmann::json* revision = optional_member(json, "revision")) {
    if (!revision->is_string() || revision->get_ref<const std::string&>().empty()) {
      throw bad_member("revision", "a branch, tag or commit hash", *revision);
    }
    request.revision = revision->get<std::string>();
  }
  if (const nlohmann::json* format = optional_member(json, "load_format")) {
    if (!format->is_string() || format->get_ref<const std::string&>() != "auto") {
      throw bad_member("load_format", "\"auto\" (the only format supported)", *format);
    }
  }
  return request;
}

RebalanceRequest parse_rebalance_request(std::string_view body) {
  const nlohmann::json json = parse_object(body);
  const nlohmann::json* map = optional_member(json, "physical_to_logical_map");
  const nlohmann::json* load = optional_member(json, "expert_load");
  if ((map == nullptr) == (load == nullptr)) {
    throw Error(ErrorKind::kInvalidArgument,
                "give exactly one of physical_to_logical_map and expert_load",
                {.field = "(body)", .found = map == nullptr ? "neither" : "both"});
  }
  RebalanceRequest request;
  if (map != nullptr) request.physical_to_logical_map = parse_expert_map(*map, "request body");
  // The eplb command's reader checks the load rows (numbers, one row per layer, equal lengths).
  if (load != nullptr) request.expert_load = expert_load_from_json(*load);
  return request;
}

}  // namespace shardload::serve
