#pragma once

// Typed, bounded reads of config.json fields, shared by model_config.cc and the families' config
// readers (src/model/arch/). Every error is Error(kConfig) on config.json naming the field, and
// never quotes more of a bad value than brief_json does.

#include <cstdint>
#include <initializer_list>
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

// The field, or nullptr when it is absent or null. A field that producers spell several ways
// (kSpellings) is found under any of them: every reader of config.json (plan, load, export,
// inspect, make-tiny --config) takes a checkpoint saved by transformers 5 as one saved before. Two
// spellings present with different values are an error naming both.
const nlohmann::json* field(const nlohmann::json& config, const char* name);

// The other names of a field, as transformers' config classes accept them (attribute_map) and as
// checkpoints of each generation write them (docs/config_fields.md).
struct Spelling {
  std::string_view name;                  // the name shardload's messages use
  std::initializer_list<const char*> also;  // the same field under other names
};
inline constexpr Spelling kSpellings[] = {
    // The routed expert count: transformers 5 writes num_local_experts for every MoE family.
    {"num_experts", {"num_local_experts"}},                  // Qwen2-MoE, Qwen3-MoE
    {"num_local_experts", {"num_experts"}},                  // Mixtral
    {"n_routed_experts", {"num_local_experts"}},             // DeepSeek-V2/V3, GLM-4-MoE
    {"moe_num_experts", {"num_local_experts", "num_experts"}},  // ERNIE-4.5-MoE
    // The model dtype: transformers 5 writes dtype, earlier versions torch_dtype.
    {"torch_dtype", {"dtype"}},
};

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
