#pragma once

// Reads a shardload export back into memory with nothing but the safetensors reader, checking the
// "Files" section of docs/layout.md on the way: the rank file names, one part list per
// rank in the manifest, every tensor of a rank in exactly one part, and each file's __metadata__.
// Header-only: the test programs are one .cc each (tests/CMakeLists.txt), so shared helpers live in
// headers.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardload/dtype.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tensor.h"
#include "temp_dir.h"

namespace shardload::testing {

// Everything that disagrees with the contract, collected so that one failing export reports all its
// faults at once instead of stopping at the first.
class Problems {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    lines_.push_back(fmt::format(format, std::forward<Args>(args)...));
  }
  bool empty() const { return lines_.empty(); }
  size_t size() const { return lines_.size(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // The first problems, one a line; a broken rule tends to repeat for every layer.
  std::string text(size_t limit = 40) const {
    std::string out;
    for (size_t i = 0; i < lines_.size() && i < limit; ++i) out += "  " + lines_[i] + "\n";
    if (lines_.size() > limit) out += fmt::format("  ... and {} more\n", lines_.size() - limit);
    return out;
  }

 private:
  std::vector<std::string> lines_;
};

// A tensor held in memory. Seen as a matrix of rows() rows (the first dimension) of row_bytes()
// bytes.
struct HostTensor {
  DType dtype = DType::kU8;
  Shape shape;
  std::vector<std::byte> bytes;

  size_t element_bytes() const { return dtype_bits(dtype) / 8; }
  uint64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  uint64_t row_bytes() const { return rows() == 0 ? 0 : bytes.size() / rows(); }
  const std::byte* row(uint64_t i) const { return bytes.data() + i * row_bytes(); }
};

inline std::string shape_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// An export read back: the manifest, the copied config.json and, per rank, its tensors by name.
struct ExportContents {
  // One rank file: its name and the sizes of its tensors.
  struct RankFile {
    std::string name;
    std::vector<uint64_t> tensor_bytes;
  };

  std::string dir;
  nlohmann::json manifest;
  nlohmann::json config;
  std::vector<std::map<std::string, HostTensor>> ranks;
  std::vector<std::vector<RankFile>> parts;  // per rank, in part order
};

inline nlohmann::json read_json_file(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

// The file name of a manifest entry (a name, or a path that ends in one).
inline std::string base_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

namespace internal {

// A decimal number filling `text`, or -1.
inline int decimal(std::string_view text) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : -1;
}

// (r, k) of "model-rank-{r}-part-{k}.safetensors", or nullopt. (Not std::regex: GCC 12's <regex>
// trips -Wmaybe-uninitialized under the sanitizers.)
inline std::optional<std::pair<int, int>> rank_file_index(std::string_view name) {
  constexpr std::string_view kPrefix = "model-rank-";
  constexpr std::string_view kSuffix = ".safetensors";
  constexpr std::string_view kPart = "-part-";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t at = name.find(kPart);
  if (at == std::string_view::npos) return std::nullopt;
  const int rank = decimal(name.substr(0, at));
  const int part = decimal(name.substr(at + kPart.size()));
  if (rank < 0 || part < 0) return std::nullopt;
  return std::make_pair(rank, part);
}

inline std::string metadata_value(const std::map<std::string, std::string>& metadata,
                                  const std::string& key) {
  const auto it = metadata.find(key);
  return it == metadata.end() ? "<missing>" : it->second;
}

// layout.md "Files": the metadata every rank file carries, every value a string.
inline void check_metadata(const std::string& file,
                           const std::map<std::string, std::string>& metadata,
                           const std::map<std::string, std::string>& expected, Problems& problems) {
  for (const auto& [key, value] : expected) {
    const std::string found = metadata_value(metadata, key);
    if (found != value) {
      problems.add("{}: __metadata__ {} is '{}', expected '{}'", file, key, found, value);
    }
  }
}

}  // namespace internal

// Reads OUT/shardload.json, OUT/config.json and every model-rank-{r}-part-{k}.safetensors. Problems
// with the files themselves are added to `problems`; an unreadable manifest or rank file throws.
inline ExportContents read_export(const std::string& dir, Problems& problems) {
  ExportContents out;
  out.dir = dir;
  out.manifest = read_json_file(dir + "/shardload.json");
  out.config = read_json_file(dir + "/config.json");
  const int tp = out.manifest.at("tp_size").get<int>();
  const int ep = out.manifest.at("ep_size").get<int>();
  if (tp < 1 || ep < 1 || tp % ep != 0) {
    problems.add("manifest tp_size={} ep_size={} is not a layout", tp, ep);
    return out;
  }
  const int moe_tp = tp / ep;

  // The rank files on disk, by rank and part.
  std::map<int, std::map<int, std::string>> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const auto index = internal::rank_file_index(name);
    if (!index) {
      if (name.starts_with("model-rank-")) problems.add("{}: not a rank file name", name);
      continue;
    }
    on_disk[index->first][index->second] = name;
  }
  for (const auto& [rank, parts] : on_disk) {
    if (rank < 0 || rank >= tp) problems.add("rank file for rank {} with tp_size={}", rank, tp);
    int k = 0;
    for (const auto& [part, name] : parts) {
      if (part != k++)
        problems.add("rank {}: parts are not numbered 0, 1, ...: found {}", rank, name);
    }
  }

  const nlohmann::json& ranks = out.manifest.at("ranks");
  if (!ranks.is_array() || ranks.size() != static_cast<size_t>(tp)) {
    problems.add("manifest ranks has {} entries for tp_size={}", ranks.size(), tp);
  }
  const std::string dtype = out.manifest.value("dtype", "");
  const std::string architecture = out.config.at("architectures").at(0).get<std::string>();
  out.ranks.resize(static_cast<size_t>(tp));
  out.parts.resize(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) {
    std::vector<std::string> listed;
    for (const nlohmann::json& rank : ranks) {
      if (rank.value("rank", -1) != r) continue;
      for (const nlohmann::json& file : rank.at("files"))
        listed.push_back(base_name(file.get<std::string>()));
    }
    std::vector<std::string> present;
    for (const auto& [part, name] : on_disk[r]) present.push_back(name);
    if (listed != present) {
      problems.add("rank {}: manifest lists files {}, the directory has {}", r, listed, present);
    }
    if (present.empty()) problems.add("rank {} has no file", r);
    const std::map<std::string, std::string> expected_metadata = {
        {"format", "shardload/1"},
        {"rank", std::to_string(r)},
        {"tp_size", std::to_string(tp)},
        {"ep_size", std::to_string(ep)},
        {"moe_tp_size", std::to_string(moe_tp)},
        {"moe_tp_rank", std::to_string(r % moe_tp)},
        {"ep_rank", std::to_string(r / moe_tp)},
        {"architecture", architecture},
        {"dtype", dtype},
    };
    for (const std::string& name : present) {
      const SafetensorsFile file = SafetensorsFile::open(dir + "/" + name);
      internal::check_metadata(name, file.header().metadata, expected_metadata, problems);
      ExportContents::RankFile& part = out.parts[static_cast<size_t>(r)].emplace_back();
      part.name = name;
      for (const TensorInfo& info : file.header().tensors) {
        part.tensor_bytes.push_back(info.nbytes());
        HostTensor tensor{info.dtype, info.shape, std::vector<std::byte>(info.nbytes())};
        file.read(info, tensor.bytes);
        if (!out.ranks[static_cast<size_t>(r)].emplace(info.name, std::move(tensor)).second) {
          problems.add("rank {}: tensor {} is in more than one part", r, info.name);
        }
      }
    }
  }
  return out;
}

}  // namespace shardload::testing
