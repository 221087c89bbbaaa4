#include "model/config_fields.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/json_input.h"

namespace shardload::config {
namespace {

using json = nlohmann::json;

// The largest value a size in config.json may take: far above any real model (DeepSeek-V3: hidden
// 7168, vocab 129280, 61 layers), and low enough that the products the planner forms (experts x 2 x
// intermediate x hidden x 4 bytes at most) stay below 2^64.
struct SizeLimit {
  std::string_view field;
  uint64_t max;
};
constexpr uint64_t kMaxConfigSize = uint64_t{1} << 24;  // any size not listed below
constexpr SizeLimit kSizeLimits[] = {
    {"hidden_size", uint64_t{1} << 20},
    {"vocab_size", uint64_t{1} << 26},
    {"num_hidden_layers", 100000},
    {"num_attention_heads", uint64_t{1} << 16},
    {"num_key_value_heads", uint64_t{1} << 16},
    {"head_dim", uint64_t{1} << 16},
};

uint64_t size_limit(std::string_view name) {
  for (const SizeLimit& limit : kSizeLimits) {
    if (limit.field == name) return limit.max;
  }
  return kMaxConfigSize;
}

}  // namespace

Error config_error(std::string message, std::string field, std::string expected,
                   std::string found) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = "config.json",
                .field = std::move(field),
                .expected = std::move(expected),
                .found = std::move(found)});
}

namespace {

const json* present(const json& config, const char* name) {
  auto it = config.find(name);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

const json* field(const json& config, const char* name) {
  const json* value = present(config, name);
  for (const Spelling& spelling : kSpellings) {
    if (spelling.name != name) continue;
    for (const char* other : spelling.also) {
      const json* also = present(config, other);
      if (also == nullptr) continue;
      if (value != nullptr && *value != *also) {
        throw config_error(
            "two spellings of one field disagree", name,
            fmt::format("{} equal to {}", other, name),
            fmt::format("{} {}, {} {}", name, brief_json(*value), other, brief_json(*also)));
      }
      if (value == nullptr) value = also;
    }
  }
  return value;
}

uint64_t get_uint(const json& config, const char* name, std::optional<uint64_t> fallback) {
  return get_uint(config, name, fallback, size_limit(name));
}

uint64_t get_uint(const json& config, const char* name, std::optional<uint64_t> fallback,
                  uint64_t max) {
  const json* value = field(config, name);
  if (value == nullptr) {
    if (fallback) return *fallback;
    throw config_error("required field missing", name, "a non-negative integer");
  }
  if (!value->is_number_integer() || (!value->is_number_unsigned() && value->get<int64_t>() < 0)) {
    throw config_error("not a non-negative integer", name, "a non-negative integer",
                       brief_json(*value));
  }
  if (value->get<uint64_t>() > max) {
    throw config_error("size out of range", name, fmt::format("at most {}", max),
                       brief_json(*value));
  }
  return value->get<uint64_t>();
}

uint64_t get_positive(const json& config, const char* name, std::optional<uint64_t> fallback) {
  return get_positive(config, name, fallback, size_limit(name));
}

uint64_t get_positive(const json& config, const char* name, std::optional<uint64_t> fallback,
                      uint64_t max) {
  const uint64_t value = get_uint(config, name, fallback, max);
  if (value == 0) throw config_error("must be positive", name, "> 0", "0");
  return value;
}

bool get_bool(const json& config, const char* name, bool fallback) {
  const json* value = field(config, name);
  if (value == nullptr) return fallback;
  if (!value->is_boolean())
    throw config_error("not a boolean", name, "true or false", brief_json(*value));
  return value->get<bool>();
}

bool in_list(const json& config, const char* name, int layer) {
  const json* list = field(config, name);
  if (list == nullptr) return false;
  if (!list->is_array())
    throw config_error("not a list", name, "a list of layer indices", brief_json(*list));
  return std::any_of(list->begin(), list->end(),
                     [&](const json& v) { return v.is_number_integer() && v.get<int>() == layer; });
}

}  // namespace shardload::config
