#include "checkpoint/weight_map.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/json_input.h"
#include "shardload/error.h"

namespace shardload::checkpoint {
namespace {

namespace dom = simdjson::dom;

const char* type_name(dom::element_type type) {
  switch (type) {
    case dom::element_type::ARRAY:
      return "array";
    case dom::element_type::OBJECT:
      return "object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE:
      return "number";
    case dom::element_type::STRING:
      return "string";
    case dom::element_type::BOOL:
      return "boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "value";
}

// Collects the members of the top-level "weight_map" object (simdjson's DOM parser picks its
// SIMD kernel at run time).
class IndexReader {
 public:
  explicit IndexReader(const std::string& file) : file_(file) {}

  WeightMap read() {
    const std::string text =
        read_bounded_file(file_, ErrorKind::kIndex, kDataJsonLimits.max_bytes, "the index");
    check_json_depth(text, kDataJsonLimits.max_depth, ErrorKind::kIndex, file_);
    dom::parser parser;
    dom::element doc;
    // simdjson's messages are its own words, never the text.
    if (const simdjson::error_code error = parser.parse(simdjson::padded_string(text)).get(doc);
        error != simdjson::SUCCESS) {
      throw Error(ErrorKind::kIndex,
                  fmt::format("invalid JSON: {}", simdjson::error_message(error)), {.file = file_});
    }
    dom::object top;
    dom::object map;
    if (doc.get_object().get(top) != simdjson::SUCCESS ||
        top["weight_map"].get_object().get(map) != simdjson::SUCCESS) {
      throw Error(ErrorKind::kIndex, "no weight_map object",
                  {.file = file_, .field = "weight_map", .expected = "object"});
    }
    for (const dom::key_value_pair entry : map) {
      std::string name(entry.key);
      std::string_view shard;
      if (entry.value.get_string().get(shard) != simdjson::SUCCESS) {
        throw Error(ErrorKind::kIndex, "weight_map value is not a file name",
                    {.file = file_,
                     .tensor = name,
                     .field = "weight_map",
                     .expected = "string",
                     .found = type_name(entry.value.type())});
      }
      // A file name, never a path: the index must not reach outside the model directory.
      if (shard.empty() || shard.find('/') != std::string_view::npos || shard == "." ||
          shard == "..") {
        throw Error(
            ErrorKind::kIndex, "weight_map names a path, not a file in the model directory",
            {.file = file_, .tensor = name, .field = "weight_map", .found = std::string(shard)});
      }
      entries_.emplace_back(std::move(name), shard_id(shard));
    }
    return finish();
  }

 private:
  WeightMap finish() {
    const auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
    // Indexes are written sorted; a repeated name keeps its last value (as a JSON object does).
    if (!std::is_sorted(entries_.begin(), entries_.end(), by_name)) {
      std::stable_sort(entries_.begin(), entries_.end(), by_name);
    }
    // Only the files the kept names point to are the model's: one named only by an overwritten
    // duplicate is ignored, as Python's json (and so transformers) ignores it.
    std::vector<bool> used(shard_names_.size(), false);
    size_t kept = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (i + 1 < entries_.size() && entries_[i + 1].first == entries_[i].first) continue;
      used[entries_[i].second] = true;
      if (kept != i) entries_[kept] = std::move(entries_[i]);
      ++kept;
    }
    entries_.resize(kept);
    WeightMap out;
    for (uint32_t i = 0; i < shard_names_.size(); ++i) {
      if (used[i]) out.shards.push_back(shard_names_[i]);
    }
    std::sort(out.shards.begin(), out.shards.end());
    std::vector<uint32_t> sorted_id(shard_names_.size());
    for (uint32_t i = 0; i < shard_names_.size(); ++i) {
      if (!used[i]) continue;
      sorted_id[i] = static_cast<uint32_t>(
          std::lower_bound(out.shards.begin(), out.shards.end(), shard_names_[i]) -
          out.shards.begin());
    }
    out.tensors.reserve(entries_.size());
    for (auto& [name, shard] : entries_)
      out.tensors.emplace_back(std::move(name), sorted_id[shard]);
    return out;
  }

  // Consecutive entries mostly name the same file: that one is compared before building a key
  // and hashing it (20k entries of a MoE index).
  uint32_t shard_id(std::string_view shard) {
    if (!shard_names_.empty() && shard_names_[last_shard_] == shard) return last_shard_;
    auto [it, added] = shard_ids_.emplace(shard, static_cast<uint32_t>(shard_names_.size()));
    if (added) shard_names_.push_back(it->first);
    return last_shard_ = it->second;
  }

  const std::string& file_;
  std::vector<std::pair<std::string, uint32_t>> entries_;  // (tensor, index into shard_names_)
  std::unordered_map<std::string, uint32_t> shard_ids_;
  std::vector<std::string> shard_names_;
  uint32_t last_shard_ = 0;
};

}  // namespace

int64_t WeightMap::shard_of(std::string_view name) const {
  const auto at =
      std::lower_bound(tensors.begin(), tensors.end(), name,
                       [](const auto& entry, std::string_view n) { return entry.first < n; });
  return at != tensors.end() && at->first == name ? static_cast<int64_t>(at->second) : -1;
}

WeightMap read_weight_map(const std::string& index_path) { return IndexReader(index_path).read(); }

}  // namespace shardload::checkpoint
