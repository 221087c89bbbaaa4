#include "shardload/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

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

// The index's weight_map: tensor name -> shard file name (a plain name inside the directory).
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const nlohmann::json index = read_json(index_path, ErrorKind::kIndex);
  const std::string file = index_path.string();
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error(ErrorKind::kIndex, "no weight_map object",
                {.file = file, .field = "weight_map", .expected = "object"});
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, value] : index["weight_map"].items()) {
    if (!value.is_string()) {
      throw Error(ErrorKind::kIndex, "weight_map value is not a file name",
                  {.file = file, .tensor = name, .field = "weight_map", .expected = "string",
                   .found = value.type_name()});
    }
    const std::string shard = value.get<std::string>();
    // A file name, never a path: the index must not reach outside the model directory.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      throw Error(ErrorKind::kIndex, "weight_map names a path, not a file in the model directory",
                  {.file = file, .tensor = name, .field = "weight_map", .found = shard});
    }
    weight_map.emplace(name, shard);
  }
  return weight_map;
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
  auto it = entries_.find(std::string(name));
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
  std::map<std::string, std::string> weight_map;
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
      weight_map = read_weight_map(dir / kIndexFile);
      for (const auto& [name, shard] : weight_map) used.push_back(shard);
      std::sort(used.begin(), used.end());
      used.erase(std::unique(used.begin(), used.end()), used.end());
      for (const std::string& shard : used) {
        if (!std::binary_search(present.begin(), present.end(), shard)) {
          const auto tensor = std::find_if(weight_map.begin(), weight_map.end(),
                                           [&](const auto& kv) { return kv.second == shard; });
          throw Error(ErrorKind::kIndex, "the index names a file that does not exist",
                      {.file = (dir / kIndexFile).string(), .tensor = tensor->first,
                       .field = "weight_map", .found = shard});
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

  for (const std::string& file : shard_files) {
    ckpt.files_.push_back(SafetensorsFile::open(file, backend));
  }
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
        auto mapped = weight_map.find(info.name);
        if (mapped == weight_map.end()) {
          throw Error(ErrorKind::kIndex, "tensor is not named by the index",
                      {.file = file.path(), .tensor = info.name});
        }
        if (mapped->second != shard_name) {
          throw Error(ErrorKind::kIndex, "tensor is in a file other than the one the index names",
                      {.file = file.path(), .tensor = info.name, .expected = mapped->second,
                       .found = shard_name});
        }
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ckpt.entries_.contains(name)) {
      throw Error(ErrorKind::kIndex, "tensor named by the index is missing from its file",
                  {.file = (fs::path(path) / shard).string(), .tensor = name,
                   .field = "weight_map"});
    }
  }
  ckpt.names_.reserve(ckpt.entries_.size());
  for (const auto& [name, entry] : ckpt.entries_) ckpt.names_.push_back(name);
  std::sort(ckpt.names_.begin(), ckpt.names_.end());
  return ckpt;
}

}  // namespace shardload
