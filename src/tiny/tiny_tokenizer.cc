// Tokenizer and generation files: small, but loadable by the `tokenizers` library.

#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "tiny/tiny_config.h"
#include "tiny/tiny_files.h"

namespace shardload::tiny {

namespace {

using nlohmann::json;

constexpr std::array<const char*, 4> kSpecialTokens = {"<unk>", "<s>", "</s>", "<pad>"};
static_assert(kUnkTokenId == 0 && kBosTokenId == 1 && kEosTokenId == 2 && kPadTokenId == 3);

json added_token(int id) {
  return {
      {"id", id},        {"content", kSpecialTokens[id]}, {"single_word", false}, {"lstrip", false},
      {"rstrip", false}, {"normalized", false},           {"special", true}};
}

json tokenizer_json(const TinyModel& m) {
  json vocab = json::object();
  json added = json::array();
  for (int id = 0; id < static_cast<int>(kSpecialTokens.size()); ++id) {
    vocab[kSpecialTokens[id]] = id;
    added.push_back(added_token(id));
  }
  for (uint64_t id = kSpecialTokens.size(); id < m.vocab; ++id) {
    // fmt rather than "w" + std::to_string(id): GCC 12 at -O3 reports a false -Wrestrict on the latter.
    vocab[fmt::format("w{}", id)] = id;
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Whitespace"}}},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<unk>"}}}};
}

json tokenizer_config_json() {
  json decoder = json::object();
  for (int id = 0; id < static_cast<int>(kSpecialTokens.size()); ++id) {
    json token = added_token(id);
    token.erase("id");
    decoder[std::to_string(id)] = token;
  }
  return {{"added_tokens_decoder", decoder},
          {"bos_token", kSpecialTokens[kBosTokenId]},
          {"eos_token", kSpecialTokens[kEosTokenId]},
          {"pad_token", kSpecialTokens[kPadTokenId]},
          {"unk_token", kSpecialTokens[kUnkTokenId]},
          {"add_bos_token", true},
          {"add_eos_token", false},
          {"clean_up_tokenization_spaces", false},
          {"model_max_length", 4096},
          {"tokenizer_class", "PreTrainedTokenizerFast"}};
}

json special_tokens_map_json() {
  return {{"bos_token", kSpecialTokens[kBosTokenId]},
          {"eos_token", kSpecialTokens[kEosTokenId]},
          {"pad_token", kSpecialTokens[kPadTokenId]},
          {"unk_token", kSpecialTokens[kUnkTokenId]}};
}

json generation_config_json() {
  return {{"_from_model_config", true},  {"bos_token_id", kBosTokenId},
          {"eos_token_id", kEosTokenId}, {"pad_token_id", kPadTokenId},
          {"do_sample", false},          {"transformers_version", "4.51.0"}};
}

}  // namespace

std::map<std::string, std::string> tokenizer_files(const TinyModel& model) {
  return {{"tokenizer.json", tokenizer_json(model).dump(2)},
          {"tokenizer_config.json", tokenizer_config_json().dump(2)},
          {"special_tokens_map.json", special_tokens_map_json().dump(2)},
          {"generation_config.json", generation_config_json().dump(2)}};
}

}  // namespace shardload::tiny
