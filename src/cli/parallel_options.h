#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "shardload/plan.h"

namespace shardload::cli {

// The layout options every planning command shares, with vLLM / SGLang spellings.
struct ParallelOptions {
  int tp = 1;
  int ep = 1;
  std::optional<int> redundant_experts;  // not given: 0, or P - E with an expert map
  std::string expert_map_file;
  std::string row_bias = "full";
  bool no_split_shared_experts = false;
  std::string dtype = "auto";
  std::string quantization = "none";

  // Throws shardload::Error(kInvalidArgument) for a bad value (reads --expert-map).
  ParallelConfig to_config() const;
};

void add_parallel_options(CLI::App& cmd, ParallelOptions& options);

}  // namespace shardload::cli
