#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "shardload/checkpoint.h"
#include "shardload/plan.h"

namespace shardload::cli {

// The layout options every planning command shares, with vLLM / SGLang spellings.
struct ParallelOptions {
  int tp = 1;
  int ep = 1;
  bool enable_expert_parallel = false;   // vLLM's flag: EP over all TP ranks (ep = tp)
  std::optional<int> redundant_experts;  // not given: 0, or P - E with an expert map
  std::string expert_map_file;
  std::string row_bias = "full";
  bool no_split_shared_experts = false;
  int dp = 1;                             // attention data-parallel size D
  bool enable_dp_attention = false;       // SGLang's flag: accepted; --dp > 1 implies it
  bool enable_dp_lm_head = false;
  std::optional<int> moe_dense_tp_size;   // SGLang: only 1 (dense MLPs replicated)
  std::string dp_style = "sglang";
  std::string moe_a2a_backend = "none";   // deepep: --ep T and shared experts replicated
  std::string dtype = "auto";
  std::string quantization = "none";
  const CLI::App* command = nullptr;  // set by add_parallel_options; tells which flags were given

  // Throws UsageError for flags that disagree with each other, Error naming the file for a bad
  // --expert-map. Values wrong for the model (--tp 0 included) are make_plan's to find: see
  // plan_for_flags.
  ParallelConfig to_config() const;
  // Whether the command line gave this flag (any of its spellings), as opposed to its default.
  bool given(std::string_view flag) const;
};

void add_parallel_options(CLI::App& cmd, ParallelOptions& options);

// make_plan, with its Error(kInvalidArgument) (a layout that does not fit the model: tp=0, ep not
// dividing tp, tp not dividing the heads, an expert map of the wrong shape) as a usage error; errors
// in the checkpoint itself (config, shapes) stay data errors.
Plan plan_for_flags(const Checkpoint& checkpoint, const ParallelConfig& parallel);

}  // namespace shardload::cli
