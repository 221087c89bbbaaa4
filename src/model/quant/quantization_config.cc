// quantization_config of config.json: which format file reads it (src/model/quant/), anything else refused.
#include <fmt/format.h>

#include <cctype>

#include "core/json_input.h"
#include "model/quant/quantization_config.h"
#include "shardload/error.h"

namespace shardload {

using json = nlohmann::json;

Error quant_error(std::string message, const std::string& field, std::string expected, std::string found) {
  return Error(ErrorKind::kConfig, std::move(message),
               {.file = "config.json", .field = "quantization_config." + field,
                .expected = std::move(expected), .found = std::move(found)});
}

std::pair<uint64_t, uint64_t> read_block_size(const json* block, const std::string& field) {
  // Real checkpoints use 128; a block larger than any tensor dimension would make no sense.
  constexpr uint64_t kMaxBlockSize = uint64_t{1} << 20;
  const auto size_ok = [](const json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<uint64_t>() <= kMaxBlockSize;
  };
  if (block == nullptr || !block->is_array() || block->size() != 2 || !size_ok((*block)[0]) ||
      !size_ok((*block)[1])) {
    throw quant_error("not two positive integers", field, fmt::format("[rows, cols], each 1-{}", kMaxBlockSize),
                      block == nullptr ? "(missing)" : brief_json(*block));
  }
  return {(*block)[0].get<uint64_t>(), (*block)[1].get<uint64_t>()};
}

std::string_view quantization_name(Quantization quantization) {
  switch (quantization) {
    case Quantization::kNone: return "none";
    case Quantization::kFp8: return "fp8";
    case Quantization::kFp8Block: return "fp8-block";
    case Quantization::kFp8Dynamic: return "fp8-dynamic";
    case Quantization::kWna16: return "wna16";
    case Quantization::kInt8: return "int8";
    case Quantization::kNvfp4: return "nvfp4";
    case Quantization::kGptq: return "gptq";
    case Quantization::kAwq: return "awq";
  }
  return "?";
}

std::string_view quantization_label(const ModelConfig& model, Quantization loaded) {
  if (model.quant_format == QuantFormat::kModelopt) return "modelopt";
  return model.quant_format == QuantFormat::kCompressedTensors ? "compressed-tensors"
                                                                : quantization_name(loaded);
}

void add_quantization_fields(json& out, const ModelConfig& model, Quantization loaded) {
  out["quantization"] = quantization_label(model, loaded);
  if (model.quant_format == QuantFormat::kCompressedTensors) {
    out["weight_strategy"] = weight_strategy_name(model.weight_strategy);
    out["activation_scheme"] = model.static_activations ? "static" : "dynamic";
  }
}

std::string_view weight_strategy_name(WeightStrategy strategy) {
  switch (strategy) {
    case WeightStrategy::kTensor: return "tensor";
    case WeightStrategy::kChannel: return "channel";
    case WeightStrategy::kBlock: return "block";
    case WeightStrategy::kGroup: return "group";
  }
  return "?";
}

void read_quantization(const json& config, ModelConfig& m) {
  auto it = config.find("quantization_config");
  // Checkpoints of compressed-tensors before it was a transformers quantizer call it so.
  if (it == config.end() || it->is_null()) it = config.find("compression_config");
  if (it == config.end() || it->is_null()) return;
  const json& q = *it;
  if (!q.is_object()) throw quant_error("not a JSON object", "", "object", q.type_name());
  const auto method = q.find("quant_method");
  const std::string name = method == q.end() ? "(missing)" : method->is_string() ? method->get<std::string>()
                                                                                  : brief_json(*method);
  if (name == "compressed-tensors") {
    read_compressed_tensors(q, m);
    return;
  }
  if (name == "mxfp4") {
    read_mxfp4(q, m);
    return;
  }
  if (name == "gptq") {
    read_gptq(q, m);
    return;
  }
  if (name == "awq") {
    read_awq(q, m);
    return;
  }
  // vLLM 0.33 takes any quant_method starting "modelopt", in any case (modelopt_fp4 is its NVFP4 method's).
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.starts_with("modelopt")) {
    read_modelopt(q, m);
    return;
  }
  if (name != "fp8") {
    throw quant_error("unsupported quantization method", "quant_method",
                      "fp8, compressed-tensors, gptq, awq, modelopt (NVFP4) or mxfp4 (gpt-oss)", name);
  }
  read_fp8(q, m);
}

}  // namespace shardload
