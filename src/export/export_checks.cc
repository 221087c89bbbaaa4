// An export is read back as written only if its manifest, its rank files and what the caller asked
// agree: a rank file copied over another rank's, a truncated rank list or a tp 4 export loaded as
// tp 8 would otherwise hand an engine the wrong weights without a word.
#include "export/export_checks.h"

#include <set>

#include <fmt/format.h>

#include "export/recorded_layout.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr int kMaxRanks =
    1 << 16;  // far above any real layout; bounds what a manifest can make us allocate

Error manifest_error(const std::string& message, const std::string& file, const std::string& field,
                     std::string expected = {}, std::string found = {}) {
  return Error(
      ErrorKind::kConfig, message,
      {.file = file, .field = field, .expected = std::move(expected), .found = std::move(found)});
}

// A JSON value as it may appear in an error: scalars as JSON, structures only by kind (never echoed
// whole).
std::string shown(const nlohmann::json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return fmt::format("a list of {}", value.size());
  const std::string text = value.dump();
  return text.size() <= 64 ? text : fmt::format("a {}-character value", text.size());
}

int positive_int(const nlohmann::json& manifest, const char* name, const std::string& file) {
  const auto it = manifest.find(name);
  if (it == manifest.end() || !it->is_number_integer() || it->get<int64_t>() < 1 ||
      it->get<int64_t>() > kMaxRanks) {
    throw manifest_error("not a layout size", file, name,
                         fmt::format("an integer in 1..{}", kMaxRanks),
                         it == manifest.end() ? "nothing" : shown(*it));
  }
  return static_cast<int>(it->get<int64_t>());
}

std::string string_field(const nlohmann::json& manifest, const char* name,
                         const std::string& file) {
  const auto it = manifest.find(name);
  if (it == manifest.end() || !it->is_string()) {
    throw manifest_error("not a string", file, name, "a string",
                         it == manifest.end() ? "nothing" : shown(*it));
  }
  return it->get<std::string>();
}

// One entry of "ranks": {"rank": r, "files": ["plain file name", ...]}.
std::vector<std::string> rank_files(const nlohmann::json& entry, int rank, const std::string& file,
                                    std::set<std::string>& seen) {
  const std::string field = fmt::format("ranks[{}]", rank);
  if (!entry.is_object())
    throw manifest_error("a rank entry is not an object", file, field, "", shown(entry));
  const auto number = entry.find("rank");
  if (number == entry.end() || !number->is_number_integer() || number->get<int64_t>() != rank) {
    throw manifest_error("the ranks are not 0..tp_size-1 in order", file, field + ".rank",
                         std::to_string(rank), number == entry.end() ? "nothing" : shown(*number));
  }
  const auto files = entry.find("files");
  if (files == entry.end() || !files->is_array() || files->empty()) {
    throw manifest_error("a rank has no files", file, field + ".files",
                         "a non-empty list of file names",
                         files == entry.end() ? "nothing" : shown(*files));
  }
  std::vector<std::string> out;
  for (const nlohmann::json& name : *files) {
    const std::string text = name.is_string() ? name.get<std::string>() : std::string();
    if (text.empty() || text == "." || text == ".." || text.find('/') != std::string::npos ||
        text.find('\0') != std::string::npos) {
      throw manifest_error("a rank file is not a file name", file, field + ".files",
                           "a file name in the export", shown(name));
    }
    if (!seen.insert(text).second) {
      throw manifest_error("a file is listed twice", file, field + ".files", "each file once",
                           text);
    }
    out.push_back(text);
  }
  return out;
}

[[noreturn]] void conflict(const std::string& file, const char* field, const std::string& exported,
                           const std::string& asked) {
  throw Error(ErrorKind::kInvalidArgument, "the layout asked for does not match the export's",
              {.file = file,
               .field = field,
               .expected = exported + " (the export's)",
               .found = asked + " (asked)"});
}

// dp_size, dp_style and scopes, when the export has them: D divides T, a known style, a known scope
// for every group.
void check_dp_fields(const nlohmann::json& manifest, const std::string& file, ExportManifest& out) {
  if (!manifest.contains("dp_size")) return;
  out.has_dp_fields = true;
  out.dp = positive_int(manifest, "dp_size", file);
  if (out.tp % out.dp != 0) {
    throw manifest_error("the layout sizes disagree", file, "dp_size",
                         fmt::format("a divisor of tp_size {}", out.tp), std::to_string(out.dp));
  }
  const std::string style = string_field(manifest, "dp_style", file);
  const std::optional<DpStyle> dp_style = dp_style_from_name(style);
  if (!dp_style) {
    throw manifest_error("not a data-parallel style", file, "dp_style", "\"sglang\" or \"vllm\"",
                         shown(style));
  }
  out.dp_style = *dp_style;
  const auto scopes = manifest.find("scopes");
  if (scopes == manifest.end() || !scopes->is_object()) {
    throw manifest_error("no scopes object", file, "scopes", "{group: scope}",
                         scopes == manifest.end() ? "nothing" : shown(*scopes));
  }
  for (const ParamGroup group : kScopedGroups) {
    const std::string name(group_name(group));
    const auto it = scopes->find(name);
    const std::optional<Scope> scope =
        it != scopes->end() && it->is_string() ? scope_from_name(it->get<std::string>()) : std::nullopt;
    if (!scope) {
      throw manifest_error("not a scope", file, "scopes." + name,
                           "\"world\", \"attention\" or \"replicated\"",
                           it == scopes->end() ? "nothing" : shown(*it));
    }
    out.scopes[group] = *scope;
  }
}

void check_expected_scopes(const nlohmann::json& manifest, const ExportManifest& checked,
                           const ExportLayout& expected, const std::string& file) {
  if (expected.dp && *expected.dp != checked.dp) {
    conflict(file, "dp_size", std::to_string(checked.dp), std::to_string(*expected.dp));
  }
  const ParallelConfig exported = exported_scoping(checked, manifest);
  ParallelConfig asked = exported;
  if (expected.dp_style) asked.dp_style = *expected.dp_style;
  if (expected.dp_lm_head) asked.dp_lm_head = *expected.dp_lm_head;
  if (expected.replicate_dense_mlp) asked.replicate_dense_mlp = *expected.replicate_dense_mlp;
  if (expected.split_shared_experts) asked.split_shared_experts = *expected.split_shared_experts;
  // The export's scopes: those it records, or (a plain export) those its layout implies.
  nlohmann::json has = scopes_json(exported);
  for (const auto& [group, scope] : checked.scopes) has[std::string(group_name(group))] = scope_name(scope);
  const nlohmann::json wants = scopes_json(asked);
  if (has != wants) conflict(file, "scopes", has.dump(), wants.dump());
}

}  // namespace

ParallelConfig exported_scoping(const ExportManifest& checked, const nlohmann::json& manifest) {
  ParallelConfig p;
  p.tp = checked.tp;
  p.ep = checked.ep;
  p.dp = checked.dp;
  p.dp_style = checked.dp_style;
  const auto no_split = manifest.find("no_split_shared_experts");
  p.split_shared_experts = !(no_split != manifest.end() && *no_split == true);
  if (checked.has_dp_fields) {
    p.dp_lm_head = checked.dp > 1 && checked.scopes.at(ParamGroup::kLmHead) == Scope::kAttention;
    p.replicate_dense_mlp = checked.scopes.at(ParamGroup::kDenseMlp) == Scope::kReplicated;
  }
  return p;
}

ExportManifest check_manifest(const nlohmann::json& manifest, const std::string& file) {
  if (!manifest.is_object())
    throw manifest_error("not a JSON object", file, "", "an object", shown(manifest));
  const auto format = manifest.find("format");
  if (format == manifest.end() || *format != "shardload/1") {
    throw manifest_error("not a shardload export manifest", file, "format", "\"shardload/1\"",
                         format == manifest.end() ? "nothing" : shown(*format));
  }
  ExportManifest out;
  out.architecture = string_field(manifest, "architecture", file);
  out.dtype = string_field(manifest, "dtype", file);
  out.tp = positive_int(manifest, "tp_size", file);
  out.ep = positive_int(manifest, "ep_size", file);
  out.moe_tp = positive_int(manifest, "moe_tp_size", file);
  if (out.tp % out.ep != 0 || out.moe_tp != out.tp / out.ep) {
    throw manifest_error("the layout sizes disagree", file, "moe_tp_size",
                         fmt::format("tp_size / ep_size = {} / {}", out.tp, out.ep),
                         std::to_string(out.moe_tp));
  }
  check_dp_fields(manifest, file, out);
  if (const auto engine = manifest.find("engine"); engine != manifest.end()) {
    const std::optional<Engine> known =
        engine->is_string() ? engine_from_name(engine->get<std::string>()) : std::nullopt;
    if (!known) {
      throw manifest_error("not an engine shardload writes for", file, "engine",
                           "\"vllm\", \"sglang\" or \"fastdeploy\"", shown(*engine));
    }
    out.engine = *known;
  }
  if (const auto post = manifest.find("engine_post_processed"); post != manifest.end()) {
    if (!post->is_boolean() || !post->get<bool>() || out.engine != Engine::kSglang) {
      throw manifest_error("engine_post_processed is only true, in an export for sglang", file,
                           "engine_post_processed", "true, with \"engine\": \"sglang\"",
                           shown(*post));
    }
    out.engine_use = EngineUse::kExportPostProcessed;
  }
  const auto ranks = manifest.find("ranks");
  if (ranks == manifest.end() || !ranks->is_array()) {
    throw manifest_error("no ranks list", file, "ranks", "a list",
                         ranks == manifest.end() ? "nothing" : shown(*ranks));
  }
  if (ranks->size() != static_cast<size_t>(out.tp)) {
    throw manifest_error("the ranks list does not hold every rank of tp_size", file, "ranks",
                         fmt::format("{} entries (tp_size)", out.tp),
                         fmt::format("{} entries", ranks->size()));
  }
  std::set<std::string> seen;
  for (int r = 0; r < out.tp; ++r)
    out.files.push_back(rank_files((*ranks)[static_cast<size_t>(r)], r, file, seen));
  out.recorded = recorded_layout(manifest);
  return out;
}

void check_expected_layout(const nlohmann::json& manifest, const ExportManifest& checked,
                           const ExportLayout& expected, const std::string& file) {
  if (expected.tp && *expected.tp != checked.tp) {
    conflict(file, "tp_size", std::to_string(checked.tp), std::to_string(*expected.tp));
  }
  const std::optional<int> ep =
      expected.ep_equals_tp ? std::optional<int>(expected.tp.value_or(checked.tp)) : expected.ep;
  if (ep && *ep != checked.ep)
    conflict(file, "ep_size", std::to_string(checked.ep), std::to_string(*ep));
  auto exported = [&](const char* name) {
    const auto it = manifest.find(name);
    return it == manifest.end() ? nlohmann::json() : *it;
  };
  if (expected.redundant_experts && exported("redundant_experts") != *expected.redundant_experts) {
    conflict(file, "redundant_experts", shown(exported("redundant_experts")),
             std::to_string(*expected.redundant_experts));
  }
  if (expected.expert_map &&
      exported("physical_to_logical_map") != nlohmann::json(*expected.expert_map)) {
    conflict(file, "physical_to_logical_map", shown(exported("physical_to_logical_map")),
             "the --expert-map's (a different map)");
  }
  if (expected.row_bias) {
    const std::string asked(row_bias_name(*expected.row_bias));
    if (exported("row_bias") != asked)
      conflict(file, "row_bias", shown(exported("row_bias")), '"' + asked + '"');
  }
  if (expected.split_shared_experts &&
      exported("no_split_shared_experts") != !*expected.split_shared_experts) {
    conflict(file, "no_split_shared_experts", shown(exported("no_split_shared_experts")),
             *expected.split_shared_experts ? "false" : "true");
  }
  check_expected_scopes(manifest, checked, expected, file);
  if (expected.dtype && checked.dtype != dtype_name(*expected.dtype)) {
    conflict(file, "dtype", shown(checked.dtype), shown(std::string(dtype_name(*expected.dtype))));
  }
  if (expected.quantize_fp8) {
    // --quantization fp8 quantizes an unquantized checkpoint and leaves an FP8 one as it is; none
    // leaves both.
    const nlohmann::json quantization = exported("quantization");
    if (*expected.quantize_fp8 ? quantization == "none" : quantization == "fp8-dynamic") {
      conflict(file, "quantization", shown(quantization), *expected.quantize_fp8 ? "fp8" : "none");
    }
  }
}

void check_rank_file(const SafetensorsFile& file, const ExportManifest& manifest, int rank) {
  const std::map<std::string, std::string>& metadata = file.header().metadata;
  std::vector<std::pair<const char*, std::string>> fields = {
      {"format", "shardload/1"},
      {"rank", std::to_string(rank)},
      {"tp_size", std::to_string(manifest.tp)},
      {"ep_size", std::to_string(manifest.ep)},
      {"moe_tp_size", std::to_string(manifest.moe_tp)},
      {"moe_tp_rank", std::to_string(rank % manifest.moe_tp)},
      {"ep_rank", std::to_string(rank / manifest.moe_tp)},
      {"architecture", manifest.architecture},
      {"dtype", manifest.dtype},
  };
  if (manifest.has_dp_fields) {
    const int attention_tp = manifest.tp / manifest.dp;
    fields.insert(fields.end(), {{"dp_size", std::to_string(manifest.dp)},
                                 {"attn_tp_size", std::to_string(attention_tp)},
                                 {"attn_tp_rank", std::to_string(rank % attention_tp)}});
  }
  const auto mismatch = [&](const char* name, const std::string& expected, const std::string& found) {
    return Error(ErrorKind::kInvalidMetadata,
                 fmt::format("the file's metadata does not match rank {} of shardload.json", rank),
                 {.file = file.path(), .field = name, .expected = expected, .found = found});
  };
  for (const auto& [name, value] : fields) {
    const auto it = metadata.find(name);
    if (it == metadata.end() || it->second != value) {
      throw mismatch(name, shown(value), it == metadata.end() ? "nothing" : shown(it->second));
    }
  }
  // A rank of a data-parallel export under a plain manifest: its tensors are cut differently.
  if (!manifest.has_dp_fields && metadata.contains("dp_size")) {
    throw mismatch("dp_size", "nothing (shardload.json has no dp_size)", shown(metadata.at("dp_size")));
  }
  // The fields no tensor shows (an expert map's order, divided row biases): an edit of
  // shardload.json. A file of an earlier export records none of them.
  if (!metadata.contains(std::string(kRecordedLayoutMarker))) return;
  for (const std::string_view key : kRecordedLayoutKeys) {
    const std::string name(key);
    const auto in_manifest = manifest.recorded.find(name);
    const auto in_file = metadata.find(name);
    const bool manifest_has = in_manifest != manifest.recorded.end();
    const bool file_has = in_file != metadata.end();
    if (manifest_has == file_has && (!file_has || in_manifest->second == in_file->second)) continue;
    throw mismatch(name.c_str(), manifest_has ? shown(in_manifest->second) : "nothing",
                   file_has ? shown(in_file->second) : "nothing");
  }
}

}  // namespace shardload
