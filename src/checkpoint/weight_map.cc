#include "checkpoint/weight_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "shardload/error.h"

namespace shardload::checkpoint {
namespace {

using json = nlohmann::json;

// SAX events of the index: collects the string members of the top-level "weight_map" object and
// ignores everything else (metadata). Errors are stored and thrown after the parse.
class WeightMapHandler : public nlohmann::json_sax<json> {
 public:
  explicit WeightMapHandler(std::string file) : file_(std::move(file)) {}

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("boolean"); }
  bool number_integer(number_integer_t) override { return value("number"); }
  bool number_unsigned(number_unsigned_t) override { return value("number"); }
  bool number_float(number_float_t, const string_t&) override { return value("number"); }
  bool binary(binary_t&) override { return value("binary"); }
  bool string(string_t& s) override {
    if (depth_ == 2 && in_map_) {
      // A file name, never a path: the index must not reach outside the model directory.
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
        return fail(Error(ErrorKind::kIndex,
                          "weight_map names a path, not a file in the model directory",
                          {.file = file_, .tensor = key_, .field = "weight_map", .found = s}));
      }
      auto [it, added] =
          shard_ids_.emplace(std::move(s), static_cast<uint32_t>(shard_names_.size()));
      if (added) shard_names_.push_back(it->first);
      entries_.emplace_back(std::move(key_), it->second);
      return true;
    }
    return value("string");
  }
  bool start_object(std::size_t) override { return open("object"); }
  bool start_array(std::size_t) override { return open("array"); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      map_next_ = k == "weight_map";
    } else if (depth_ == 2 && in_map_) {
      key_ = std::move(k);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return fail(
        Error(ErrorKind::kIndex, fmt::format("invalid JSON: {}", e.what()), {.file = file_}));
  }

  WeightMap finish() {
    if (error_) throw *error_;
    if (!top_object_ || !seen_map_) {
      throw Error(ErrorKind::kIndex, "no weight_map object",
                  {.file = file_, .field = "weight_map", .expected = "object"});
    }
    const auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
    // Indexes are written sorted; a repeated name keeps its last value (as a JSON object does).
    if (!std::is_sorted(entries_.begin(), entries_.end(), by_name)) {
      std::stable_sort(entries_.begin(), entries_.end(), by_name);
    }
    WeightMap out;
    out.shards = shard_names_;
    std::sort(out.shards.begin(), out.shards.end());
    std::vector<uint32_t> sorted_id(shard_names_.size());
    for (uint32_t i = 0; i < shard_names_.size(); ++i) {
      sorted_id[i] = static_cast<uint32_t>(
          std::lower_bound(out.shards.begin(), out.shards.end(), shard_names_[i]) -
          out.shards.begin());
    }
    out.tensors.reserve(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (i + 1 < entries_.size() && entries_[i + 1].first == entries_[i].first) continue;
      out.tensors.emplace_back(std::move(entries_[i].first), sorted_id[entries_[i].second]);
    }
    return out;
  }

 private:
  // A scalar value: inside weight_map it must have been a string.
  bool value(const char* type) {
    if (depth_ == 1 && map_next_) return not_object(type);
    if (depth_ == 2 && in_map_) {
      return fail(Error(ErrorKind::kIndex, "weight_map value is not a file name",
                        {.file = file_,
                         .tensor = key_,
                         .field = "weight_map",
                         .expected = "string",
                         .found = type}));
    }
    return true;
  }
  bool open(const char* type) {
    if (depth_ == 0) top_object_ = std::string_view(type) == "object";
    if (depth_ == 1 && map_next_) {
      if (std::string_view(type) != "object") return not_object(type);
      in_map_ = seen_map_ = true;
      map_next_ = false;
    } else if (depth_ == 2 && in_map_) {
      return value(type);
    }
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    if (depth_ == 1) in_map_ = false;
    return true;
  }
  bool not_object(const char*) {
    return fail(Error(ErrorKind::kIndex, "no weight_map object",
                      {.file = file_, .field = "weight_map", .expected = "object"}));
  }
  bool fail(Error error) {
    if (!error_) error_ = std::move(error);
    return false;
  }

  std::string file_;
  int depth_ = 0;
  bool top_object_ = false;
  bool map_next_ = false;  // the value after the top-level key "weight_map" comes next
  bool in_map_ = false;
  bool seen_map_ = false;
  std::string key_;
  std::vector<std::pair<std::string, uint32_t>> entries_;  // (tensor, index into shard_names_)
  std::unordered_map<std::string, uint32_t> shard_ids_;
  std::vector<std::string> shard_names_;
  std::optional<Error> error_;
};

}  // namespace

int64_t WeightMap::shard_of(std::string_view name) const {
  const auto at =
      std::lower_bound(tensors.begin(), tensors.end(), name,
                       [](const auto& entry, std::string_view n) { return entry.first < n; });
  return at != tensors.end() && at->first == name ? static_cast<int64_t>(at->second) : -1;
}

WeightMap read_weight_map(const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIndex, "cannot open", {.file = index_path});
  std::ostringstream text;
  text << in.rdbuf();
  const std::string bytes = std::move(text).str();
  WeightMapHandler handler(index_path);
  json::sax_parse(bytes, &handler);
  return handler.finish();
}

}  // namespace shardload::checkpoint
