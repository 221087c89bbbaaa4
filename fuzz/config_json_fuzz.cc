// libFuzzer target: arbitrary bytes as a model's config.json, read as Checkpoint::open reads it.
#include "core/json_input.h"
#include "json_fuzz.h"
#include "shardload/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    const nlohmann::json config = shardload::parse_json(
        text, shardload::ErrorKind::kConfig, "config.json", shardload::kConfigJsonLimits);
    const shardload::ModelConfig model = shardload::ModelConfig::from_json(config);
    shardload::fuzz::check(model.layers > 0 && model.heads > 0 && model.hidden > 0);
  });
  return 0;
}
