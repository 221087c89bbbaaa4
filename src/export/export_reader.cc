// Loads an export's pre-sharded rank files directly: no config parsing, no planning.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/json_input.h"
#include "core/parallel_for.h"
#include "shardload/error.h"
#include "shardload/export.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_manifest(const fs::path& path) {
  return read_json_file(path.string(), ErrorKind::kConfig, kDataJsonLimits, "shardload.json");
}

}  // namespace

bool is_export_dir(const std::string& path) {
  const fs::path manifest = fs::path(path) / "shardload.json";
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return false;
  try {
    const nlohmann::json json = read_manifest(manifest);
    return json.is_object() && json.value("format", "") == "shardload/1";
  } catch (const Error&) {
    return false;
  }
}

LoadedExport load_export(const std::string& dir, const std::vector<int>& wanted, int threads) {
  const fs::path manifest_path = fs::path(dir) / "shardload.json";
  LoadedExport out;
  out.manifest = read_manifest(manifest_path);
  const nlohmann::json& ranks = out.manifest["ranks"];
  if (!ranks.is_array()) {
    throw Error(ErrorKind::kConfig, "no ranks list", {.file = manifest_path.string(), .field = "ranks"});
  }
  struct Copy {
    size_t rank;
    size_t file;
    const TensorInfo* info;
    uint64_t offset;
  };
  std::vector<SafetensorsFile> files;
  std::vector<Copy> copies;
  for (const nlohmann::json& entry : ranks) {
    const int rank = entry.value("rank", -1);
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), rank) == wanted.end()) continue;
    LoadedExport::Rank& loaded = out.ranks.emplace_back();
    loaded.rank = rank;
    uint64_t offset = 0;
    for (const nlohmann::json& name : entry.value("files", nlohmann::json::array())) {
      if (!name.is_string() || name.get<std::string>().find('/') != std::string::npos) {
        throw Error(ErrorKind::kConfig, "a rank file is not a file name",
                    {.file = manifest_path.string(), .field = "ranks", .found = name.dump()});
      }
      files.push_back(SafetensorsFile::open((fs::path(dir) / name.get<std::string>()).string()));
      for (const TensorInfo& info : files.back().header().tensors) {
        loaded.tensors.push_back({info.name, info.dtype, info.shape, offset, info.nbytes()});
        copies.push_back({out.ranks.size() - 1, files.size() - 1, &info, offset});
        offset += (info.nbytes() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
      }
    }
    loaded.buffer = AlignedBuffer(offset);
  }
  for (int rank : wanted) {
    if (std::none_of(out.ranks.begin(), out.ranks.end(),
                     [&](const LoadedExport::Rank& r) { return r.rank == rank; })) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} is not in the export", rank),
                  {.file = manifest_path.string()});
    }
  }
  parallel_for(copies.size(), threads, [&](size_t i, int) {
    const Copy& copy = copies[i];
    const SafetensorsFile& file = files[copy.file];
    file.read(*copy.info, std::span(out.ranks[copy.rank].buffer.data() + copy.offset, copy.info->nbytes()));
  });
  return out;
}

}  // namespace shardload
