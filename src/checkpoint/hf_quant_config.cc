#include "checkpoint/hf_quant_config.h"

#include "core/json_input.h"
#include "shardload/error.h"

namespace shardload {

bool merge_hf_quant_config(const std::filesystem::path& dir, nlohmann::json& config) {
  if (!config.is_object()) return false;
  for (const char* field : {"quantization_config", "compression_config"}) {
    if (const auto it = config.find(field); it != config.end() && !it->is_null()) return false;
  }
  const std::filesystem::path file = dir / "hf_quant_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  nlohmann::json quant = read_json_file(file.string(), ErrorKind::kConfig, kConfigJsonLimits, "hf_quant_config.json");
  if (!quant.is_object()) {
    throw Error(ErrorKind::kConfig, "hf_quant_config.json is not a JSON object",
                {.file = file.string(), .expected = "object", .found = quant.type_name()});
  }
  // vLLM 0.33 (ModelArchConfigConvertor._normalize_quantization_config) knows the file as ModelOpt's by its
  // producer and reads it as unquantized otherwise, which these U8 weights are not: refused.
  const auto producer = quant.find("producer");
  const bool modelopt = producer != quant.end() && producer->is_object() && producer->contains("name") &&
                        (*producer)["name"] == "modelopt";
  if (!modelopt) {
    throw Error(ErrorKind::kConfig, "hf_quant_config.json not written by NVIDIA ModelOpt",
                {.file = file.string(), .field = "producer.name", .expected = "modelopt",
                 .found = producer == quant.end() ? "(missing)" : producer->dump()});
  }
  if (!quant.contains("quant_method")) quant["quant_method"] = "modelopt";
  config["quantization_config"] = std::move(quant);
  return true;
}

}  // namespace shardload
