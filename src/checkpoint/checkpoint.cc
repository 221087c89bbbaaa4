#include "shardload/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <exception>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "checkpoint/hf_quant_config.h"
#include "checkpoint/hub_cache.h"
#include "checkpoint/weight_map.h"
#include "model/arch/family.h"
#include "core/json_input.h"
#include "core/parallel_for.h"
#include "shardload/error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";

std::vector<std::string> safetensors_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One file's header, or why it could not be opened (rethrown only if the model uses the file).
struct OpenResult {
  std::optional<SafetensorsFile> file;
  std::exception_ptr failed;
};

OpenResult open_file(const std::string& path, IoBackend backend) {
  OpenResult result;
  try {
    result.file.emplace(SafetensorsFile::open(path, backend));
  } catch (...) {
    result.failed = std::current_exception();
  }
  return result;
}

// config.json of a model directory, or null (with a warning) when there is none; `files` gets the
// files it was read from (hf_quant_config.json too when it supplies the quantization_config).
nlohmann::json read_config(const fs::path& dir, std::vector<std::string>& warnings, std::vector<std::string>& files) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file)) {
    warnings.push_back(fmt::format("{}: no config.json", dir.string()));
    return nullptr;
  }
  nlohmann::json config =
      read_json_file(file.string(), ErrorKind::kConfig, kConfigJsonLimits, "config.json");
  if (!config.is_object()) {
    throw Error(ErrorKind::kConfig, "config.json is not a JSON object", {.file = file.string()});
  }
  files.push_back("config.json");
  if (merge_hf_quant_config(dir, config)) files.push_back("hf_quant_config.json");
  return config;
}

// The files a checkpoint's tensors are in, and what is known of them once they are found.
struct Shards {
  std::vector<std::string> paths;    // in the order Checkpoint::files_ will hold them
  bool indexed = false;              // a directory with model.safetensors.index.json
  checkpoint::WeightMap weight_map;  // the index (empty without one)
  // Headers already opened, one per path (empty: none yet). A directory with an index has its
  // headers parsed while the index is read: a MoE index and its shard headers each take
  // milliseconds.
  std::vector<OpenResult> opened;
};

// Reads the index while every .safetensors file of the directory is opened, in parallel; the
// index's failure is reported first.
std::vector<OpenResult> read_index_and_headers(const fs::path& dir,
                                               const std::vector<std::string>& present,
                                               IoBackend backend,
                                               checkpoint::WeightMap& weight_map) {
  std::vector<OpenResult> opened(present.size());
  std::exception_ptr index_failed;
  parallel_for(present.size() + 1, 0, [&](size_t i, int) {
    if (i == 0) {
      try {
        weight_map = checkpoint::read_weight_map((dir / kIndexFile).string());
      } catch (...) {
        index_failed = std::current_exception();
      }
      return;
    }
    opened[i - 1] = open_file((dir / present[i - 1]).string(), backend);
  });
  if (index_failed) std::rethrow_exception(index_failed);
  return opened;
}

// Every file the index names is in the directory.
void check_index_files_exist(const fs::path& dir, const std::vector<std::string>& present,
                             const checkpoint::WeightMap& weight_map) {
  const std::vector<std::string>& used = weight_map.shards;
  for (uint32_t s = 0; s < used.size(); ++s) {
    if (!std::binary_search(present.begin(), present.end(), used[s])) {
      const auto tensor = std::find_if(weight_map.tensors.begin(), weight_map.tensors.end(),
                                       [&](const auto& kv) { return kv.second == s; });
      throw Error(ErrorKind::kIndex, "the index names a file that does not exist",
                  {.file = (dir / kIndexFile).string(), .tensor = tensor->first,
                   .field = "weight_map", .found = used[s]});
    }
  }
}

// The opened headers of the `used` files, in the order of `used` (both lists are sorted).
std::vector<OpenResult> keep_used(const std::vector<std::string>& present,
                                  const std::vector<std::string>& used,
                                  std::vector<OpenResult>& opened) {
  std::vector<OpenResult> kept;
  for (size_t i = 0, u = 0; i < present.size() && u < used.size(); ++i) {
    if (present[i] == used[u]) {
      kept.push_back(std::move(opened[i]));
      ++u;
    }
  }
  return kept;
}

// Without an index: model.safetensors, or the directory's only .safetensors file.
std::vector<std::string> single_file(const std::string& path,
                                     const std::vector<std::string>& present) {
  if (std::binary_search(present.begin(), present.end(), std::string(kSingleFile))) {
    return {std::string(kSingleFile)};
  }
  if (present.size() == 1) return present;
  if (present.empty()) throw Error(ErrorKind::kIo, "no .safetensors file", {.file = path});
  throw Error(ErrorKind::kIndex,
              fmt::format("{} .safetensors files and no {}", present.size(), kIndexFile),
              {.file = path});
}

// The files of a model directory (`shards.indexed` already set): those its index names, or its
// single file. Real repositories ship e.g. consolidated.safetensors beside the shards: ignored,
// with a warning.
void find_shards(const std::string& path, IoBackend backend, Shards& shards,
                 std::vector<std::string>& warnings) {
  const fs::path dir(path);
  const std::vector<std::string> present = safetensors_in(dir);
  std::vector<std::string> used;
  if (shards.indexed) {
    std::vector<OpenResult> opened =
        read_index_and_headers(dir, present, backend, shards.weight_map);
    check_index_files_exist(dir, present, shards.weight_map);
    used = shards.weight_map.shards;
    shards.opened = keep_used(present, used, opened);
  } else {
    used = single_file(path, present);
  }
  for (const std::string& name : present) {
    if (!std::binary_search(used.begin(), used.end(), name)) {
      warnings.push_back(fmt::format("{}: ignoring {}, which the model does not name", path, name));
    }
  }
  for (const std::string& name : used) shards.paths.push_back((dir / name).string());
}

// The headers of every file, parsed in parallel (a MoE shard's header lists thousands of tensors)
// unless already opened; every file is tried and the first failing one in order is reported, as a
// sequential open would.
std::vector<SafetensorsFile> open_headers(Shards& shards, IoBackend backend) {
  std::vector<OpenResult>& opened = shards.opened;
  if (opened.empty()) {
    opened.resize(shards.paths.size());
    parallel_for(shards.paths.size(), 0,
                 [&](size_t i, int) { opened[i] = open_file(shards.paths[i], backend); });
  }
  std::vector<SafetensorsFile> files;
  files.reserve(opened.size());
  for (OpenResult& result : opened) {
    if (result.failed) std::rethrow_exception(result.failed);
    files.push_back(std::move(*result.file));
  }
  return files;
}

}  // namespace

const Checkpoint::Entry* Checkpoint::find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

const Checkpoint::Entry& Checkpoint::at(std::string_view name) const {
  if (const Entry* entry = find(name)) return *entry;
  throw Error(ErrorKind::kTensorNotFound, "tensor not in checkpoint",
              {.file = path_, .tensor = std::string(name)});
}

bool Checkpoint::has_config() const { return config_ != nullptr && !config_->is_null(); }

const nlohmann::json& Checkpoint::config() const {
  static const nlohmann::json kNone;
  return config_ != nullptr ? *config_ : kNone;
}

namespace {

// A multimodal checkpoint of a supported family: the tensors outside its text model's prefix (the
// vision tower, the projector) are skipped by the planner; the user hears it once, with a count.
void warn_other_towers(const nlohmann::json& config, const std::vector<std::string>& names,
                       std::vector<std::string>& warnings) {
  const auto archs = config.find("architectures");
  if (archs == config.end() || !archs->is_array() || archs->empty() || !archs->front().is_string()) return;
  const std::string architecture = archs->front().get<std::string>();
  const arch::Family* family = arch::family_for_architecture(architecture);
  if (family == nullptr || family->multimodal_architecture != architecture) return;
  const std::string_view prefix = family->multimodal_weight_prefix;
  const auto other = [&](const std::string& name) { return !arch::text_model_name(*family, prefix, name); };
  const auto skipped = std::count_if(names.begin(), names.end(), other);
  if (skipped == 0) return;
  // The other towers by their modules (Qwen3.5: model.visual.*; Kimi-K2.5: mm_projector.*, vision_tower.*),
  // the text model beside them named.
  std::set<std::string> towers;
  const size_t after = family->multimodal_replaced_prefix.size();
  for (const std::string& name : names) {
    if (!other(name)) continue;
    const size_t dot = name.find('.', after);
    towers.insert(dot == std::string::npos ? name : name.substr(0, dot + 1) + "*");
  }
  warnings.push_back(fmt::format("{}: {} tensors of {} (the vision tower and projector) are skipped; shardload "
                                 "loads the text model ({}*)",
                                 architecture, skipped, fmt::join(towers, ", "), prefix));
}

}  // namespace

std::string resolve_model_path(const std::string& arg, const std::string& revision) {
  std::error_code ec;
  const bool path = fs::exists(fs::status(arg, ec)) || !checkpoint::looks_like_hub_id(arg);
  if (revision.empty()) return path ? arg : checkpoint::hub_snapshot(arg).value_or(arg);
  if (path) {
    throw Error(ErrorKind::kInvalidArgument,
                "a revision names a version of a Hugging Face model id, and this is a path",
                {.file = arg,
                 .field = "revision",
                 .expected = "a model id such as org/name",
                 .found = "a path"});
  }
  std::optional<std::string> snapshot = checkpoint::hub_snapshot(arg, revision);
  if (!snapshot) {
    throw Error(ErrorKind::kIo, "this revision of the model is not in the local Hugging Face cache",
                {.file = checkpoint::hub_repo_dir(arg),
                 .field = "revision",
                 .expected = fmt::format("refs/{0} or snapshots/{0} (shardload reads local files "
                                         "only: `hf download {1} --revision {0}`)",
                                         revision, arg),
                 .found = "neither"});
  }
  return *std::move(snapshot);
}

namespace {

CheckpointIdentity identity_of(const std::string& path, const std::vector<SafetensorsFile>& files,
                               const nlohmann::json* config, std::vector<std::string> config_files) {
  CheckpointIdentity identity;
  identity.config_files = std::move(config_files);
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  identity.resolved_path = ec ? path : resolved.string();
  for (const SafetensorsFile& file : files) {
    identity.files.emplace_back(fs::path(file.path()).filename().string(), file.identity());
  }
  if (config != nullptr && !config->is_null()) {
    const std::string text = config->dump();
    identity.config_xxh3 = XXH3_64bits(text.data(), text.size());
  }
  return identity;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& arg, IoBackend backend) {
  Checkpoint ckpt;
  const std::string path = resolve_model_path(arg);
  ckpt.path_ = path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if ((ec || !fs::exists(status)) && checkpoint::looks_like_hub_id(path)) {
    throw Error(ErrorKind::kIo,
                "no such file or directory, nor a Hugging Face model downloaded into the local cache",
                {.file = path,
                 .expected = fmt::format("a checkpoint directory, a .safetensors file, or a model id "
                                         "at {} (refs/main and its snapshot; shardload reads local "
                                         "files only: `hf download {}`)",
                                         checkpoint::hub_repo_dir(path), path),
                 .found = "neither"});
  }
  if (ec || !fs::exists(status)) {
    throw Error(ErrorKind::kIo, "no such file or directory", {.file = path});
  }
  Shards shards;
  std::vector<std::string> config_files;
  if (fs::is_directory(status)) {
    if (is_export_dir(path)) {
      throw Error(ErrorKind::kInvalidArgument,
                  "is a shardload export, not a checkpoint: load it as it is (`shardload load`, "
                  "shardload.load_export) or give the checkpoint it was made from",
                  {.file = path});
    }
    ckpt.is_directory_ = true;
    shards.indexed = fs::exists(fs::path(path) / kIndexFile);
    ckpt.config_ =
        std::make_shared<const nlohmann::json>(read_config(fs::path(path), ckpt.warnings_, config_files));
    find_shards(path, backend, shards, ckpt.warnings_);
  } else {
    shards.paths.push_back(path);
  }
  ckpt.files_ = open_headers(shards, backend);
  ckpt.identity_ = identity_of(path, ckpt.files_, ckpt.config_.get(), std::move(config_files));

  // The name table: every tensor's file and, below, its place in tensor_names().
  size_t tensor_count = 0;
  for (const SafetensorsFile& file : ckpt.files_) tensor_count += file.header().tensors.size();
  ckpt.entries_.reserve(tensor_count);
  bool unique = true;  // no tensor in two files
  for (size_t f = 0; f < ckpt.files_.size(); ++f) {
    for (const TensorInfo& info : ckpt.files_[f].header().tensors) {
      unique &= ckpt.entries_.emplace(info.name, Entry{f, &info, 0}).second;
    }
  }
  if (!(unique && shards.indexed && ckpt.take_index_names(shards.weight_map))) {
    if (!unique || shards.indexed) {
      ckpt.entries_.clear();
      // Throws the first problem, in file order.
      ckpt.check_tensors(shards.weight_map, shards.indexed);
    }
    ckpt.sort_names();
  }
  if (ckpt.config_ != nullptr) warn_other_towers(*ckpt.config_, ckpt.tensor_names(), ckpt.warnings_);
  return ckpt;
}

// The common case, checked in one pass: the index names exactly the headers' tensors, each in its
// file (files_[s] is the index's shard s: both are in sorted file-name order). The index's names are
// then tensor_names() as they are, sorted.
bool Checkpoint::take_index_names(checkpoint::WeightMap& weight_map) {
  if (weight_map.tensors.size() != entries_.size()) return false;
  for (size_t i = 0; i < weight_map.tensors.size(); ++i) {
    const auto& [name, shard] = weight_map.tensors[i];
    const auto it = entries_.find(name);
    if (it == entries_.end() || it->second.file != shard) return false;
    it->second.index = static_cast<uint32_t>(i);
  }
  names_.reserve(weight_map.tensors.size());
  for (auto& entry : weight_map.tensors) names_.push_back(std::move(entry.first));
  return true;
}

// Every tensor in one file only and, with an index, in the file the index names; every index entry
// in its file. Throws the first problem in file order (entries_ is rebuilt from scratch).
void Checkpoint::check_tensors(const checkpoint::WeightMap& weight_map, bool indexed) {
  for (size_t f = 0; f < files_.size(); ++f) {
    const SafetensorsFile& file = files_[f];
    const std::string shard_name = fs::path(file.path()).filename().string();
    for (const TensorInfo& info : file.header().tensors) {
      auto [it, inserted] = entries_.emplace(info.name, Entry{f, &info, 0});
      if (!inserted) {
        throw Error(ErrorKind::kIndex, "tensor is in two files",
                    {.file = file.path(), .tensor = info.name,
                     .expected = fs::path(files_[it->second.file].path()).filename().string(),
                     .found = shard_name});
      }
      if (indexed) {
        const int64_t mapped = weight_map.shard_of(info.name);
        if (mapped < 0) {
          throw Error(ErrorKind::kIndex, "tensor is not named by the index",
                      {.file = file.path(), .tensor = info.name});
        }
        const std::string& mapped_name = weight_map.shards[static_cast<size_t>(mapped)];
        if (mapped_name != shard_name) {
          throw Error(ErrorKind::kIndex, "tensor is in a file other than the one the index names",
                      {.file = file.path(), .tensor = info.name, .expected = mapped_name,
                       .found = shard_name});
        }
      }
    }
  }
  for (const auto& [name, shard] : weight_map.tensors) {
    if (!entries_.contains(name)) {
      throw Error(ErrorKind::kIndex, "tensor named by the index is missing from its file",
                  {.file = (fs::path(path_) / weight_map.shards[shard]).string(), .tensor = name,
                   .field = "weight_map"});
    }
  }
}

// tensor_names() sorted, and each entry's index into it.
void Checkpoint::sort_names() {
  std::vector<std::pair<std::string_view, Entry*>> order;
  order.reserve(entries_.size());
  for (auto& [name, entry] : entries_) order.emplace_back(name, &entry);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  names_.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    names_.emplace_back(order[i].first);
    order[i].second->index = static_cast<uint32_t>(i);
  }
}

}  // namespace shardload
