// Load statistics arrive as JSON from a file or a request; every malformed shape is an Error, never
// a crash.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "shardload/eplb.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr const char* kField = "expert_load";

// Long rows would swamp the one-line message, so only their start is shown.
std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr size_t kMax = 40;
  if (text.size() > kMax) {
    text.resize(kMax);
    text += "...";
  }
  return text;
}

[[noreturn]] void malformed(std::string message, std::string expected, std::string found) {
  throw Error(ErrorKind::kInvalidArgument, std::move(message),
              {.field = kField, .expected = std::move(expected), .found = std::move(found)});
}

}  // namespace

std::vector<std::vector<double>> parse_expert_load(std::string_view json_text) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("invalid JSON: {}", e.what()));
  }
  if (!parsed.is_object()) {
    throw Error(ErrorKind::kInvalidArgument, "load statistics are not a JSON object",
                {.expected = R"({"expert_load": [[...], ...]})", .found = brief(parsed)});
  }
  const auto it = parsed.find(kField);
  if (it == parsed.end()) {
    throw Error(ErrorKind::kInvalidArgument, "no expert_load member",
                {.expected = R"({"expert_load": [[...], ...]})", .found = brief(parsed)});
  }
  if (!it->is_array()) malformed("not a list of layers", "[[...], ...]", brief(*it));
  std::vector<std::vector<double>> load;
  load.reserve(it->size());
  for (size_t l = 0; l < it->size(); ++l) {
    const nlohmann::json& row = (*it)[l];
    if (!row.is_array())
      malformed(fmt::format("layer {} is not a list", l), "a list of numbers", brief(row));
    std::vector<double>& out = load.emplace_back();
    out.reserve(row.size());
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number()) {
        malformed(fmt::format("layer {} expert {} is not a number", l, e), "a number",
                  brief(row[e]));
      }
      out.push_back(row[e].get<double>());
    }
  }
  return load;
}

std::vector<std::vector<double>> read_expert_load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(ErrorKind::kIo, "cannot read load statistics: is a directory", {.file = path});
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open load statistics", {.file = path});
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::kIo, "cannot read load statistics", {.file = path});
  try {
    return parse_expert_load(text.str());
  } catch (const Error& e) {
    throw e.with_file(path);
  }
}

}  // namespace shardload
