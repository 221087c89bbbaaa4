#include "shardload/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <exception>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "checkpoint/weight_map.h"
#include "core/parallel_for.h"
#include "shardload/error.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";

nlohmann::json read_json(const fs::path& path, ErrorKind kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(kind, "cannot open", {.file = path.string()});
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(kind, fmt::format("invalid JSON: {}", e.what()), {.file = path.string()});
  }
}

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

Checkpoint Checkpoint::open(const std::string& path, IoBackend backend) {
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw Error(ErrorKind::kIo, "no such file or directory", {.file = path});
  }

  std::vector<std::string> shard_files;  // paths, in the order files_ will hold them
  checkpoint::WeightMap weight_map;
  const bool indexed = fs::is_directory(status) && fs::exists(fs::path(path) / kIndexFile);
  if (!fs::is_directory(status)) {
    shard_files.push_back(path);
  } else {
    ckpt.is_directory_ = true;
    const fs::path dir(path);
    if (fs::exists(dir / "config.json")) {
      ckpt.config_ = read_json(dir / "config.json", ErrorKind::kConfig);
      if (!ckpt.config_.is_object()) {
        throw Error(ErrorKind::kConfig, "config.json is not a JSON object",
                    {.file = (dir / "config.json").string()});
      }
    } else {
      ckpt.warnings_.push_back(fmt::format("{}: no config.json", path));
    }
    const std::vector<std::string> present = safetensors_in(dir);
    std::vector<std::string> used;
    if (indexed) {
      weight_map = checkpoint::read_weight_map((dir / kIndexFile).string());
      used = weight_map.shards;
      for (uint32_t s = 0; s < used.size(); ++s) {
        if (!std::binary_search(present.begin(), present.end(), used[s])) {
          const auto tensor = std::find_if(weight_map.tensors.begin(), weight_map.tensors.end(),
                                           [&](const auto& kv) { return kv.second == s; });
          throw Error(ErrorKind::kIndex, "the index names a file that does not exist",
                      {.file = (dir / kIndexFile).string(), .tensor = tensor->first,
                       .field = "weight_map", .found = used[s]});
        }
      }
    } else if (std::binary_search(present.begin(), present.end(), std::string(kSingleFile))) {
      used.push_back(std::string(kSingleFile));
    } else if (present.size() == 1) {
      used = present;
    } else if (present.empty()) {
      throw Error(ErrorKind::kIo, "no .safetensors file", {.file = path});
    } else {
      throw Error(ErrorKind::kIndex,
                  fmt::format("{} .safetensors files and no {}", present.size(), kIndexFile),
                  {.file = path});
    }
    // Real repositories ship e.g. consolidated.safetensors beside the shards: ignored, with a warning.
    for (const std::string& name : present) {
      if (!std::binary_search(used.begin(), used.end(), name)) {
        ckpt.warnings_.push_back(fmt::format("{}: ignoring {}, which the model does not name",
                                             path, name));
      }
    }
    for (const std::string& name : used) shard_files.push_back((dir / name).string());
  }

  // Headers are parsed in parallel (a MoE shard's header lists thousands of tensors); every file is
  // tried and the first failing one in order is reported, as a sequential open would.
  std::vector<std::optional<SafetensorsFile>> opened(shard_files.size());
  std::vector<std::exception_ptr> failed(shard_files.size());
  parallel_for(shard_files.size(), 0, [&](size_t i, int) {
    try {
      opened[i].emplace(SafetensorsFile::open(shard_files[i], backend));
    } catch (...) {
      failed[i] = std::current_exception();
    }
  });
  ckpt.files_.reserve(opened.size());
  for (size_t i = 0; i < opened.size(); ++i) {
    if (failed[i]) std::rethrow_exception(failed[i]);
    ckpt.files_.push_back(std::move(*opened[i]));
  }
  size_t tensor_count = 0;
  for (const SafetensorsFile& file : ckpt.files_) tensor_count += file.header().tensors.size();
  ckpt.entries_.reserve(tensor_count);
  for (size_t f = 0; f < ckpt.files_.size(); ++f) {
    const SafetensorsFile& file = ckpt.files_[f];
    const std::string shard_name = fs::path(file.path()).filename().string();
    for (const TensorInfo& info : file.header().tensors) {
      auto [it, inserted] = ckpt.entries_.emplace(info.name, Entry{f, &info});
      if (!inserted) {
        throw Error(ErrorKind::kIndex, "tensor is in two files",
                    {.file = file.path(), .tensor = info.name,
                     .expected = fs::path(ckpt.files_[it->second.file].path()).filename().string(),
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
    if (!ckpt.entries_.contains(name)) {
      throw Error(ErrorKind::kIndex, "tensor named by the index is missing from its file",
                  {.file = (fs::path(path) / weight_map.shards[shard]).string(), .tensor = name,
                   .field = "weight_map"});
    }
  }
  ckpt.names_.reserve(ckpt.entries_.size());
  for (const auto& [name, entry] : ckpt.entries_) ckpt.names_.emplace_back(name);
  std::sort(ckpt.names_.begin(), ckpt.names_.end());
  return ckpt;
}

}  // namespace shardload
