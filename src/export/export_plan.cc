// An export's rank files are checked against what its config.json and shardload.json plan, not
// against their own headers: a rank file of another export of the same architecture and layout
// (16 experts where the model has 8), a dropped or added tensor, a changed shape or dtype would
// otherwise load as the model's weights.
#include "export/export_plan.h"

#include <filesystem>

#include <fmt/format.h>

#include "checkpoint/hf_quant_config.h"
#include "core/json_input.h"
#include "shard/config_plan.h"
#include "shardload/error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxRedundantExperts = 1 << 20;

Error layout_error(const std::string& message, const std::string& file, const std::string& field,
                   std::string expected, std::string found) {
  return Error(
      ErrorKind::kConfig, message,
      {.file = file, .field = field, .expected = std::move(expected), .found = std::move(found)});
}

// A JSON value as it may appear in an error: short ones as they are, long ones by their length.
std::string short_text(const nlohmann::json& value) {
  const std::string text = value.dump();
  return text.size() <= 64 ? text : fmt::format("a {}-character value", text.size());
}

std::string field_text(const nlohmann::json& manifest, const char* name) {
  const auto it = manifest.find(name);
  return it == manifest.end() ? "nothing" : short_text(*it);
}

// The layout fields check_manifest leaves to the plan: row bias, dtype, dynamic FP8, redundant
// experts and the expert map.
ParallelConfig layout_of(const nlohmann::json& manifest, const ExportManifest& checked,
                         const std::string& file) {
  ParallelConfig p = exported_scoping(checked, manifest);
  const auto row_bias = manifest.find("row_bias");
  const std::optional<RowBias> bias = row_bias != manifest.end() && row_bias->is_string()
                                          ? row_bias_from_name(row_bias->get<std::string>())
                                          : std::nullopt;
  if (!bias) {
    throw layout_error("not a row bias", file, "row_bias", "\"full\" or \"divided\"",
                       field_text(manifest, "row_bias"));
  }
  p.row_bias = *bias;
  p.dtype = parse_dtype(checked.dtype);
  if (!p.dtype) {
    throw layout_error("not a dtype", file, "dtype", "a safetensors dtype such as \"BF16\"",
                       field_text(manifest, "dtype"));
  }
  p.quantize_fp8 = manifest.value("quantization", nlohmann::json()) == "fp8-dynamic";
  const auto redundant = manifest.find("redundant_experts");
  if (redundant == manifest.end() || !redundant->is_number_integer() ||
      redundant->get<int64_t>() < 0 || redundant->get<int64_t>() > kMaxRedundantExperts) {
    throw layout_error("not a number of redundant experts", file, "redundant_experts",
                       fmt::format("an integer in 0..{}", kMaxRedundantExperts),
                       field_text(manifest, "redundant_experts"));
  }
  const auto map = manifest.find("physical_to_logical_map");
  if (map == manifest.end() || !map->is_array()) {
    throw layout_error("no expert map", file, "physical_to_logical_map",
                       "a list of rows ([] for a dense model)",
                       field_text(manifest, "physical_to_logical_map"));
  }
  const int redundant_experts = static_cast<int>(redundant->get<int64_t>());
  if (!map->empty()) {
    try {
      p.expert_map = parse_expert_map(*map, file);
    } catch (const Error& e) {
      throw layout_error(e.message(), file, "physical_to_logical_map", e.expected(), e.found());
    }
    p.redundant_experts = redundant_experts;
  } else if (redundant_experts != 0) {
    // An export with experts writes their map: without one, the redundant experts would size a map
    // of the manifest's making.
    throw layout_error("redundant experts without an expert map", file, "redundant_experts", "0",
                       std::to_string(redundant_experts));
  }
  return p;
}

// shardload.json's value of a field beside the plan's; `field` named on a difference.
void check_planned(const nlohmann::json& manifest, const char* field, const nlohmann::json& planned,
                   const std::string& file) {
  const auto it = manifest.find(field);
  if (it != manifest.end() && *it == planned) return;
  throw layout_error("shardload.json does not give what config.json plans with its layout", file,
                     field, fmt::format("{} (planned from config.json)", short_text(planned)),
                     field_text(manifest, field));
}

}  // namespace

Plan plan_of_export(const std::string& dir, const nlohmann::json& manifest,
                    const ExportManifest& checked,
                    const std::function<bool(std::string_view)>& optional_present) {
  const std::string manifest_file = (fs::path(dir) / "shardload.json").string();
  const std::string config_file = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(config_file, ec)) {
    throw Error(ErrorKind::kConfig,
                "an export keeps the model's config.json: its rank files are checked against the "
                "layout it plans",
                {.file = config_file, .expected = "the model's config.json", .found = "nothing"});
  }
  nlohmann::json config =
      read_json_file(config_file, ErrorKind::kConfig, kConfigJsonLimits, "config.json");
  merge_hf_quant_config(dir, config);  // an export keeps the checkpoint's hf_quant_config.json
  const ParallelConfig parallel = layout_of(manifest, checked, manifest_file);
  Plan plan;
  try {
    plan = plan_from_config(config, parallel, optional_present);
  } catch (const Error& e) {
    // A layout config.json does not take is a broken export, not a bad argument of the caller.
    ErrorDetails details = e.details();
    if (details.file.empty() || details.file == "config.json") details.file = config_file;
    throw Error(ErrorKind::kConfig,
                fmt::format("config.json does not plan with shardload.json's layout: {}",
                            e.message()),
                std::move(details));
  }
  check_planned(manifest, "architecture", plan.model.architecture, manifest_file);
  check_planned(manifest, "quantization", quantization_label(plan.model, plan.quantization), manifest_file);
  // A model with experts has their map, with as many redundant experts as it places.
  const bool moe = plan.physical_experts > 0;
  check_planned(manifest, "physical_to_logical_map",
                moe ? nlohmann::json(plan.physical_to_logical) : nlohmann::json::array(),
                manifest_file);
  if (plan.parallel.has_dp_fields() || checked.has_dp_fields) {
    check_planned(manifest, "scopes", scopes_json(plan.parallel), manifest_file);
  }
  return plan;
}

}  // namespace shardload
