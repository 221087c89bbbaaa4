// Loads an export's pre-sharded rank files directly: the plan of the export's own layout only checks
// them, and no byte is converted or moved between ranks.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "core/admission.h"
#include "core/json_input.h"
#include "core/parallel_for.h"
#include "core/plural.h"
#include "export/export_checks.h"
#include "export/export_plan.h"
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
  // Everything is checked before a tensor is read: the manifest, what was asked of it, each rank
  // file's metadata, then each rank file's tensors against the plan of the export's layout.
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
  std::vector<int> ranks;          // the ranks read, in order
  std::vector<size_t> first_file;  // per rank read: its first file in `files`, then files.size()
  for (int rank = 0; rank < manifest.tp; ++rank) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), rank) == wanted.end()) continue;
    ranks.push_back(rank);
    first_file.push_back(files.size());
    for (const std::string& name : manifest.files[static_cast<size_t>(rank)]) {
      files.push_back(SafetensorsFile::open((fs::path(dir) / name).string()));
      check_rank_file(files.back(), manifest, rank);
    }
  }
  first_file.push_back(files.size());
  // A parameter a checkpoint may lack (GLM's q/k norms, ERNIE's moe_statics) was exported when a
  // rank file read has it: a rank that lacks it then is missing it, and a file it was dropped from
  // alike on every rank records one tensor more than it holds.
  std::unordered_set<std::string_view> present;
  for (const SafetensorsFile& file : files) {
    for (const TensorInfo& info : file.header().tensors) present.insert(info.name);
  }
  // An export written for an engine holds that engine's names (engine_tensors.h), a parameter a
  // checkpoint may lack (ERNIE's moe_statics) too.
  const Plan plan = plan_of_export(dir, *out.manifest, manifest, [&](std::string_view name) {
    for (const std::string& held : engine_names_of(manifest.engine, std::string(name))) {
      if (present.contains(held)) return true;
    }
    return false;
  });
  check_engine_plan(plan, manifest.engine, manifest.engine_use);
  std::vector<Copy> copies;
  std::vector<uint64_t> sizes;  // of each rank's buffer
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::vector<const SafetensorsFile*> rank_files;
    for (size_t f = first_file[i]; f < first_file[i + 1]; ++f) rank_files.push_back(&files[f]);
    const RankPlan& rank = plan.ranks[static_cast<size_t>(ranks[i])];
    check_rank_tensors(rank.rank, engine_tensors(plan, rank, manifest.engine, manifest.engine_use),
                       rank_files);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    LoadedExport::Rank& loaded = out.ranks.emplace_back();
    loaded.rank = ranks[i];
    uint64_t offset = 0;
    for (size_t f = first_file[i]; f < first_file[i + 1]; ++f) {
      for (const TensorInfo& info : files[f].header().tensors) {
        loaded.tensors.push_back({info.name, info.dtype, info.shape, offset, info.nbytes()});
        copies.push_back({out.ranks.size() - 1, f, &info, offset});
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
