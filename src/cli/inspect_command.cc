#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/checkpoint_warnings.h"
#include "cli/commands.h"
#include "cli/export_note.h"
#include "cli/model_revision.h"
#include "core/plural.h"
#include "core/shape_text.h"
#include "model/config_fields.h"
#include "shardload/checkpoint.h"
#include "shardload/export.h"
#include "shardload/model.h"

namespace shardload::cli {
namespace {

struct InspectOptions {
  std::string path;
  std::string revision;
  bool json = false;
  bool summary = false;
};

std::string human_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string describe_config(const nlohmann::json& config) {
  std::string out;
  if (auto* archs = config::field(config, "architectures"); archs && archs->is_array() &&
                                                               !archs->empty()) {
    out += archs->front().is_string() ? archs->front().get<std::string>() : archs->front().dump();
  }
  if (auto* type = config::field(config, "model_type"); type && type->is_string()) {
    out += fmt::format(" ({})", type->get<std::string>());
  }
  auto add = [&](std::string_view label, const char* name) {
    if (auto* value = config::field(config, name)) out += fmt::format(", {} {}", label, value->dump());
  };
  add("layers", "num_hidden_layers");
  add("hidden", "hidden_size");
  add("heads", "num_attention_heads");
  add("kv heads", "num_key_value_heads");
  // Each family's name for the expert count, read as plan and load read it: any of its spellings,
  // and two that disagree are an error (model/config_fields.h).
  for (std::string_view name : expert_count_fields()) {
    if (auto* value = config::field(config, std::string(name).c_str())) {
      out += fmt::format(", experts {}", value->dump());
      break;
    }
  }
  add("vocab", "vocab_size");
  add("dtype", "torch_dtype");  // or dtype
  return out;
}

nlohmann::json to_json(const Checkpoint& ckpt, const std::map<std::string, uint64_t>& dtype_bytes,
                       uint64_t total_bytes) {
  namespace fs = std::filesystem;
  nlohmann::json out;
  out["path"] = ckpt.path();
  if (ckpt.has_config()) out["config"] = ckpt.config();
  out["files"] = nlohmann::json::array();
  for (const SafetensorsFile& file : ckpt.files()) {
    out["files"].push_back({{"file", fs::path(file.path()).filename().string()},
                            {"bytes", file.file_size()},
                            {"tensors", file.header().tensors.size()},
                            {"metadata", file.header().metadata}});
  }
  out["tensors"] = nlohmann::json::array();
  for (const std::string& name : ckpt.tensor_names()) {
    const Checkpoint::Entry& entry = ckpt.at(name);
    const SafetensorsFile& file = ckpt.files()[entry.file];
    out["tensors"].push_back({{"name", name},
                              {"dtype", dtype_name(entry.info->dtype)},
                              {"shape", entry.info->shape},
                              {"bytes", entry.info->nbytes()},
                              {"file", fs::path(file.path()).filename().string()},
                              {"offset", file.header().data_start + entry.info->begin}});
  }
  out["total_tensors"] = ckpt.tensor_names().size();
  out["total_bytes"] = total_bytes;
  out["dtypes"] = dtype_bytes;
  out["warnings"] = ckpt.warnings();
  return out;
}

// An export is not a checkpoint (its rank files hold one rank each, under engine names): say what
// it is, and validate and list its rank files.
void inspect_export(const InspectOptions& options) {
  namespace fs = std::filesystem;
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(options.path)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model-rank-") && name.ends_with(".safetensors"))
      paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  if (options.json) {
    nlohmann::json out = {{"path", options.path}, {"export", read_export_manifest(options.path)}};
    out["files"] = nlohmann::json::array();
    for (const fs::path& path : paths) {
      const SafetensorsFile file = SafetensorsFile::open(path.string());
      out["files"].push_back({{"file", path.filename().string()},
                              {"bytes", file.file_size()},
                              {"tensors", file.header().tensors.size()},
                              {"metadata", file.header().metadata}});
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("export: {}: {}\n", options.path, describe_export(options.path));
  std::cout << fmt::format(
      "note: `shardload load {}` loads it as it is (--checksum lists its tensors)\n", options.path);
  uint64_t total = 0;
  for (const fs::path& path : paths) {
    const SafetensorsFile file = SafetensorsFile::open(path.string());
    total += file.file_size();
    std::cout << fmt::format("file: {}  {}, {}\n", path.filename().string(),
                             count_of(file.header().tensors.size(), "tensor"),
                             human_bytes(file.file_size()));
  }
  std::cout << fmt::format("total: {} bytes ({}) in {}\n", total, human_bytes(total),
                           count_of(paths.size(), "rank file"));
}

void run_inspect(const InspectOptions& options) {
  namespace fs = std::filesystem;
  if (is_export_dir(options.path)) return inspect_export(options);
  const Checkpoint ckpt = Checkpoint::open(options.path);
  print_warnings(ckpt);

  std::map<std::string, uint64_t> dtype_bytes;
  std::map<std::string, uint64_t> dtype_count;
  uint64_t total_bytes = 0;
  for (const std::string& name : ckpt.tensor_names()) {
    const TensorInfo& info = *ckpt.at(name).info;
    dtype_bytes[std::string(dtype_name(info.dtype))] += info.nbytes();
    ++dtype_count[std::string(dtype_name(info.dtype))];
    total_bytes += info.nbytes();
  }
  if (options.json) {
    std::cout << to_json(ckpt, dtype_bytes, total_bytes).dump(2) << "\n";
    return;
  }

  std::cout << fmt::format("{}: {}\n", ckpt.is_directory() ? "model" : "file", ckpt.path());
  if (ckpt.has_config()) std::cout << fmt::format("config: {}\n", describe_config(ckpt.config()));
  if (!options.summary) {
    size_t width = 4;
    for (const std::string& name : ckpt.tensor_names()) width = std::max(width, name.size());
    std::cout << fmt::format("{:<{}}  {:<7}  {:<20}  {:>12}  {}\n", "NAME", width, "DTYPE", "SHAPE",
                             "BYTES", "FILE");
    for (const std::string& name : ckpt.tensor_names()) {
      const Checkpoint::Entry& entry = ckpt.at(name);
      std::cout << fmt::format("{:<{}}  {:<7}  {:<20}  {:>12}  {}\n", name, width,
                               dtype_name(entry.info->dtype), shape_text(entry.info->shape),
                               entry.info->nbytes(),
                               fs::path(ckpt.files()[entry.file].path()).filename().string());
    }
  }
  for (const SafetensorsFile& file : ckpt.files()) {
    std::cout << fmt::format("file: {}  {}, {}\n", fs::path(file.path()).filename().string(),
                             count_of(file.header().tensors.size(), "tensor"),
                             human_bytes(file.file_size()));
  }
  for (const auto& [dtype, bytes] : dtype_bytes) {
    std::cout << fmt::format("dtype: {:<7} {}, {}\n", dtype, count_of(dtype_count[dtype], "tensor"),
                             human_bytes(bytes));
  }
  std::cout << fmt::format("total: {}, {} bytes ({}) in {}\n",
                           count_of(ckpt.tensor_names().size(), "tensor"), total_bytes,
                           human_bytes(total_bytes), count_of(ckpt.files().size(), "file"));
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Validate a .safetensors file or a model directory and list its tensors");
  cmd->footer("Example: shardload inspect --summary build/tiny-qwen3-moe");
  cmd->add_option("path", options->path,
                  "A .safetensors file, a model directory, or a Hugging Face model id in the local cache")
      ->required();
  add_revision_option(*cmd, options->revision);
  cmd->add_flag("--json", options->json, "Print JSON instead of text");
  cmd->add_flag("--summary", options->summary, "Print totals only, not every tensor");
  cmd->callback([options] {
    options->path = model_at_revision(options->path, options->revision);
    run_inspect(*options);
  });
}

}  // namespace shardload::cli
