#pragma once

#include <map>
#include <string>

#include "tiny/tiny_model.h"

namespace shardload::tiny {

// The small non-tensor files of a checkpoint directory, by file name: tokenizer.json (a valid
// WordLevel tokenizer covering the whole vocabulary), tokenizer_config.json,
// special_tokens_map.json, generation_config.json.
std::map<std::string, std::string> tokenizer_files(const TinyModel& model);

}  // namespace shardload::tiny
