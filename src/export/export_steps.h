#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "export/staging_dir.h"
#include "shardload/checkpoint.h"
#include "shardload/export.h"
#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload {

// The steps of export_ranks, for exports whose ranks are written by several processes (the
// distributed export): a staging directory, each rank's files, then the manifest and the move.

// The directory the export is written into (StagingDir beside options.out). Throws Error(kIo).
std::unique_ptr<StagingDir> make_export_staging(const ExportOptions& options);

// Writes one rank's model-rank-R-part-K.safetensors files into `dir`, with the names, buffers and
// dtypes of `engine` for `use` (engine_tensors.h); returns its manifest entry {"rank": R, "files":
// [...]}.
nlohmann::json write_rank_files(const Plan& plan, const RankWeights& weights,
                                const std::filesystem::path& dir, uint64_t max_file_size,
                                Engine engine, EngineUse use = EngineUse::kExport);

// Copies the model's other files, writes the manifest with `manifest_ranks` (every rank, in order)
// and moves the staged export into place.
void finish_export(const Checkpoint& checkpoint, const Plan& plan, Engine engine, EngineUse use,
                   const nlohmann::json& manifest_ranks, StagingDir& staging, bool overwrite);

}  // namespace shardload
