// Loads an export's pre-sharded rank files directly: no config parsing, no planning.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/admission.h"
#include "core/json_input.h"
#include "core/parallel_for.h"
#include "core/plural.h"
#include "export/export_checks.h"
#include "shardload/error.h"
#include "shardload/export.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_manifest(const fs::path& path) {
  return read_json_file(path.string(), ErrorKind::kConfig, kDataJsonLimits, "shardload.json");
}

}  // namespace

nlohmann::json read_export_manifest(const std::string& dir) {
  return read_manifest(fs::path(dir) / "shardload.json");
}

LoadedExport load_export(const std::string& dir, const std::vector<int>& wanted, int threads,
                         const ExportLayout& expected) {
  const fs::path manifest_path = fs::path(dir) / "shardload.json";
  LoadedExport out;
  out.manifest = std::make_shared<const nlohmann::json>(read_manifest(manifest_path));
  // Everything is checked before a tensor is read: the manifest, what was asked of it, then each
  // rank file.
  const ExportManifest manifest = check_manifest(*out.manifest, manifest_path.string());
  check_expected_layout(*out.manifest, manifest, expected, manifest_path.string());
  for (int rank : wanted) {
    if (rank < 0 || rank >= manifest.tp) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} is not in the export", rank),
                  {.file = manifest_path.string(),
                   .field = "rank",
                   .expected = fmt::format("0..{} (tp_size {})", manifest.tp - 1, manifest.tp),
                   .found = std::to_string(rank)});
    }
  }
  struct Copy {
    size_t rank;
    size_t file;
    const TensorInfo* info;
    uint64_t offset;
  };
  std::vector<SafetensorsFile> files;
  std::vector<Copy> copies;
  std::vector<uint64_t> sizes;  // of each rank's buffer
  for (int rank = 0; rank < manifest.tp; ++rank) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), rank) == wanted.end()) continue;
    LoadedExport::Rank& loaded = out.ranks.emplace_back();
    loaded.rank = rank;
    uint64_t offset = 0;
    for (const std::string& name : manifest.files[static_cast<size_t>(rank)]) {
      files.push_back(SafetensorsFile::open((fs::path(dir) / name).string()));
      check_rank_file(files.back(), manifest, rank);
      for (const TensorInfo& info : files.back().header().tensors) {
        loaded.tensors.push_back({info.name, info.dtype, info.shape, offset, info.nbytes()});
        copies.push_back({out.ranks.size() - 1, files.size() - 1, &info, offset});
        offset += (info.nbytes() + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
      }
    }
    sizes.push_back(offset);
  }
  // Every rank's size is known from the headers: the buffers are allocated only when all of them
  // fit in what this process can get.
  uint64_t needed = 0;
  for (uint64_t size : sizes) needed += size;
  admit_memory(needed,
               fmt::format("the buffers of {} of the export", count_of(sizes.size(), "rank")));
  for (size_t r = 0; r < sizes.size(); ++r) out.ranks[r].buffer = AlignedBuffer(sizes[r]);
  parallel_for(copies.size(), threads, [&](size_t i, int) {
    const Copy& copy = copies[i];
    const SafetensorsFile& file = files[copy.file];
    file.read(*copy.info, std::span(out.ranks[copy.rank].buffer.data() + copy.offset, copy.info->nbytes()));
  });
  return out;
}

}  // namespace shardload
