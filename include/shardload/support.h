#pragma once

// What shardload supports, worked out from the code rather than written down: every registered
// family (src/model/arch/registry.cc), each checkpoint format make-tiny writes for it and the
// planner plans, and whether each engine target takes it (check_engine_plan over the tables of
// src/export/engine_tensors.cc). `shardload support` prints it; the README's matrix is that output.

#include <string>
#include <vector>

#include "shardload/export.h"

namespace shardload {

// Whether something is supported, and why not, or on what condition.
struct SupportCell {
  bool yes = false;
  // No: the refusal's message. Yes: the messages of the refusals on the way to the accepting
  // attempt (an engine model that needs every decoder layer MoE, an FP8 export SGLang takes only
  // post-processed); empty when the plain attempt was accepted.
  std::vector<std::string> reasons{};
};

// A column of the matrix: an engine and what its layout is for. kExport falls back on
// kExportPostProcessed where the plain export is refused and the post-processed one is not.
struct SupportTarget {
  Engine engine;
  EngineUse use;
};
inline constexpr SupportTarget kSupportTargets[] = {{Engine::kVllm, EngineUse::kExport},
                                                    {Engine::kVllm, EngineUse::kHooks},
                                                    {Engine::kSglang, EngineUse::kExport},
                                                    {Engine::kSglang, EngineUse::kHooks}};

// "vLLM export", "vLLM hooks", "SGLang export", "SGLang hooks".
std::string support_target_label(const SupportTarget& target);

struct FormatSupport {
  std::string
      format;  // "bf16" (make-tiny --quant none), or the --quant spelling: "fp8", ..., "mxfp4"
  SupportCell loads{};
  std::vector<SupportCell> targets{};  // one per kSupportTargets entry; empty when !loads.yes
};

struct FamilySupport {
  std::string family;                    // config.json's model_type
  std::vector<FormatSupport> formats{};  // every make-tiny --quant format, in its order
};

// Plans each family's make-tiny config in each format at tp 1 (and, for a MoE family, with every
// decoder layer MoE, as real Qwen3-MoE checkpoints are) and asks check_engine_plan of each target.
std::vector<FamilySupport> support_matrix();

}  // namespace shardload
