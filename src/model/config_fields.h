#pragma once

// Typed, bounded reads of config.json fields, shared by model_config.cc and the families' config
// readers (src/model/arch/). Every error is Error(kConfig) on config.json naming the field, and
// never quotes more of a bad value than brief_json does.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "shardload/error.h"

namespace shardload::config {

// Bounds of family-specific counts (the shared sizes are bounded by name in config_fields.cc): far
// above any real model (DeepSeek-V3: 256 routed experts, 1 shared, 8 groups).
inline constexpr uint64_t kMaxExperts = uint64_t{1} << 16;
inline constexpr uint64_t kMaxSharedExperts = 1024;
inline constexpr uint64_t kMaxExpertGroups = uint64_t{1} << 16;

Error config_error(std::string message, std::string field, std::string expected = {},
                   std::string found = {});

// The field, or nullptr when it is absent or null.
const nlohmann::json* field(const nlohmann::json& config, const char* name);

// A non-negative integer no larger than `max` (by default the bound of its name, 2^24 for a name
// with none); `fallback` when absent, else an error.
uint64_t get_uint(const nlohmann::json& config, const char* name,
                  std::optional<uint64_t> fallback = {});
uint64_t get_uint(const nlohmann::json& config, const char* name, std::optional<uint64_t> fallback,
                  uint64_t max);
// As get_uint, and not zero.
uint64_t get_positive(const nlohmann::json& config, const char* name,
                      std::optional<uint64_t> fallback = {});
uint64_t get_positive(const nlohmann::json& config, const char* name,
                      std::optional<uint64_t> fallback, uint64_t max);
bool get_bool(const nlohmann::json& config, const char* name, bool fallback);
// Whether the list of layer indices `name` (absent: empty) holds `layer`.
bool in_list(const nlohmann::json& config, const char* name, int layer);

}  // namespace shardload::config
