#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardload/safetensors.h"

namespace shardload {

namespace checkpoint {
struct WeightMap;
}

// What a checkpoint was when it was opened, before any tensor byte was read: its path with every
// link resolved, each safetensors file's identity and config.json's hash. Bytes read from two opens
// with equal identities are the same bytes (short of a file rewritten with its size, header and
// modification time restored); a link pointed elsewhere, a file replaced or rewritten in place
// changes it.
struct CheckpointIdentity {
  std::string resolved_path;
  std::vector<std::pair<std::string, FileIdentity>> files;  // file name (relative to the path), identity
  // XXH3-64 of config.json as parsed, with hf_quant_config.json's quantization_config merged in where
  // that file supplies it (0: no config)
  uint64_t config_xxh3 = 0;
  std::vector<std::string> config_files;  // the files config_xxh3 covers: config.json[, hf_quant_config.json]
  bool operator==(const CheckpointIdentity&) const = default;
};

// A Hugging Face checkpoint: a directory with config.json and either one model.safetensors or shards named by
// model.safetensors.index.json, or a single .safetensors file. Opening validates every file header, the index
// (every weight_map tensor exists in the file it names, no tensor in two files) and collects warnings (e.g. a
// .safetensors file the index does not name, which is ignored). A shardload export is refused
// (is_export_dir).
class Checkpoint {
 public:
  struct Entry {
    size_t file;  // index into files()
    const TensorInfo* info;
    uint32_t index;  // position in tensor_names()
  };

  // `path`: a directory, a .safetensors file, or a Hugging Face model id in the local cache
  // (resolve_model_path; path() is then its snapshot folder).
  static Checkpoint open(const std::string& path, IoBackend backend = IoBackend::kPread);

  const std::string& path() const { return path_; }
  bool is_directory() const { return is_directory_; }
  bool has_config() const;
  // config.json as parsed (null when the checkpoint has none).
  const nlohmann::json& config() const;
  const std::vector<SafetensorsFile>& files() const { return files_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const CheckpointIdentity& identity() const { return identity_; }

  // All tensors, sorted by name.
  const std::vector<std::string>& tensor_names() const { return names_; }
  const Entry* find(std::string_view name) const;
  const Entry& at(std::string_view name) const;  // throws Error(kTensorNotFound)

 private:
  bool take_index_names(checkpoint::WeightMap& weight_map);
  void check_tensors(const checkpoint::WeightMap& weight_map, bool indexed);
  void sort_names();

  std::string path_;
  bool is_directory_ = false;
  // Behind a pointer so that this header needs only nlohmann's forward declarations (shared: the
  // parsed config never changes, and copies of a Checkpoint may share it).
  std::shared_ptr<const nlohmann::json> config_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> warnings_;
  CheckpointIdentity identity_;
  std::vector<std::string> names_;
  // Keys view the names in files_' headers (heap storage that stays put when the vector moves).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string_view, Entry, NameHash, std::equal_to<>> entries_;
};

// What a model argument names: `arg` itself when it exists or is not a Hugging Face model id, else the
// id's snapshot folder in the local Hugging Face cache (src/checkpoint/hub_cache.h: where
// huggingface_hub downloads to; nothing is downloaded), or `arg` when it is not there either
// (Checkpoint::open then says where it looked). Throws Error(kIo) for a cache entry that is not one.
// With a `revision` (a branch, tag or commit hash, as `hf download --revision` takes): the id's
// snapshot at that revision, which must be in the cache (Error(kIo) saying where it looked
// otherwise); Error(kInvalidArgument) when `arg` is a path or not a model id, or `revision` not a
// revision name.
std::string resolve_model_path(const std::string& arg, const std::string& revision = {});

// Whether a directory is a shardload export (has shardload.json with format shardload/1). Here,
// not in export.h's module, because Checkpoint::open refuses one: its rank files are not a
// checkpoint (Error(kInvalidArgument) saying what the directory is, where the file listing alone
// would only say that there is no index).
bool is_export_dir(const std::string& path);

}  // namespace shardload
