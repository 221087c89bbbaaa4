#pragma once

#include <nlohmann/json.hpp>

#include "tiny/tiny_model.h"

namespace shardload::tiny {

// Token ids shared by config.json, generation_config.json and the tokenizer files.
inline constexpr int kUnkTokenId = 0;
inline constexpr int kBosTokenId = 1;
inline constexpr int kEosTokenId = 2;
inline constexpr int kPadTokenId = arch::kTinyPadTokenId;

// config.json with the real field names of the family's Hugging Face config.
nlohmann::json config_json(const TinyModel& model);

}  // namespace shardload::tiny
