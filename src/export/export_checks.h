#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/engine_tensors.h"
#include "shardload/export.h"
#include "shardload/safetensors.h"

namespace shardload {

// What load_export trusts of an export, checked field by field (the manifest is hostile input).
struct ExportManifest {
  std::string architecture;
  std::string dtype;  // safetensors spelling
  int tp = 0;
  int ep = 0;
  int moe_tp = 0;
  // The data-parallel fields (layout.md "Data-parallel attention"), present when the export has them.
  bool has_dp_fields = false;
  int dp = 1;
  DpStyle dp_style = DpStyle::kSglang;
  std::map<ParamGroup, Scope> scopes;
  std::vector<std::vector<std::string>> files;  // per rank r = 0..tp-1, its file names
  // The fields each rank file records as well (recorded_layout.h), as its metadata spells them.
  std::map<std::string, std::string> recorded;
  Engine engine = Engine::kLayout;  // "engine", absent in exports of docs/layout.md's names
  // kExportPostProcessed where "engine_post_processed" is true (an SGLang export of its
  // post-processed FP8 layers), else kExport.
  EngineUse engine_use = EngineUse::kExport;
};

// Checks shardload.json's format, layout and rank list (`file` names it in errors). Throws
// Error(kConfig).
ExportManifest check_manifest(const nlohmann::json& manifest, const std::string& file);

// Checks that the layout asked for fits the export. Throws Error(kInvalidArgument) naming both
// values.
void check_expected_layout(const nlohmann::json& manifest, const ExportManifest& checked,
                           const ExportLayout& expected, const std::string& file);

// Checks that a rank file's metadata names `rank` and the manifest's layout, and (a file that
// records them) the manifest's other layout fields. Throws Error(kInvalidMetadata).
void check_rank_file(const SafetensorsFile& file, const ExportManifest& manifest, int rank);

// The layout shardload.json describes, as far as scopes go (tp, ep, dp, dp_style, shared experts
// split or not, lm_head and dense MLP scopes).
ParallelConfig exported_scoping(const ExportManifest& checked, const nlohmann::json& manifest);

// Checks that one rank's files (in order) hold exactly the `expected` tensors of `rank` (the
// exported tensors its plan has, under the names of the export's engine), each in one file with the
// expected dtype and shape, and as many tensors as each file records. Throws Error naming the file
// and tensor: kUnknownTensor (one not expected), kDuplicateTensor, kUnsupportedDtype,
// kShapeMismatch, kTensorNotFound (one expected), kInvalidMetadata (count).
void check_rank_tensors(int rank, const std::vector<EngineTensor>& expected,
                        const std::vector<const SafetensorsFile*>& files);

}  // namespace shardload
