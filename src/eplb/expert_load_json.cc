// Load statistics arrive as JSON from a file or a request; every malformed shape is an Error, never
// a crash.
#include "eplb/expert_load_json.h"

#include <fmt/format.h>

#include "core/json_input.h"
#include "shardload/eplb.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr const char* kField = "expert_load";

[[noreturn]] void malformed(std::string message, std::string expected, std::string found) {
  throw Error(ErrorKind::kInvalidArgument, std::move(message),
              {.field = kField, .expected = std::move(expected), .found = std::move(found)});
}

}  // namespace

std::vector<std::vector<double>> expert_load_from_json(const nlohmann::json& rows) {
  if (!rows.is_array()) malformed("not a list of layers", "[[...], ...]", brief_json(rows));
  std::vector<std::vector<double>> load;
  load.reserve(rows.size());
  for (size_t l = 0; l < rows.size(); ++l) {
    const nlohmann::json& row = rows[l];
    if (!row.is_array())
      malformed(fmt::format("layer {} is not a list", l), "a list of numbers", brief_json(row));
    std::vector<double>& out = load.emplace_back();
    out.reserve(row.size());
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number()) {
        malformed(fmt::format("layer {} expert {} is not a number", l, e), "a number",
                  brief_json(row[e]));
      }
      out.push_back(row[e].get<double>());
    }
  }
  return load;
}

std::vector<std::vector<double>> parse_expert_load(std::string_view json_text) {
  const nlohmann::json parsed =
      parse_json(json_text, ErrorKind::kInvalidArgument, {}, kDataJsonLimits);
  if (!parsed.is_object()) {
    throw Error(ErrorKind::kInvalidArgument, "load statistics are not a JSON object",
                {.expected = R"({"expert_load": [[...], ...]})", .found = brief_json(parsed)});
  }
  const auto it = parsed.find(kField);
  if (it == parsed.end()) {
    throw Error(ErrorKind::kInvalidArgument, "no expert_load member",
                {.expected = R"({"expert_load": [[...], ...]})", .found = brief_json(parsed)});
  }
  return expert_load_from_json(*it);
}

std::vector<std::vector<double>> read_expert_load(const std::string& path) {
  const std::string text =
      read_bounded_file(path, ErrorKind::kIo, kDataJsonLimits.max_bytes, "load statistics");
  try {
    return parse_expert_load(text);
  } catch (const Error& e) {
    throw e.with_file(path);
  }
}

}  // namespace shardload
