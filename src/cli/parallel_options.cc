#include "cli/parallel_options.h"

#include "shardload/error.h"

namespace shardload::cli {

void add_parallel_options(CLI::App& cmd, ParallelOptions& o) {
  cmd.add_option("--tensor-parallel-size,--tp", o.tp, "Tensor-parallel size T (ranks)");
  cmd.add_option("--expert-parallel-size,--ep", o.ep, "Expert-parallel size (divides T)");
  cmd.add_option("--redundant-experts", o.redundant_experts, "Redundant (replica) experts R");
  cmd.add_option("--expert-map", o.expert_map_file,
                 "JSON file {\"physical_to_logical_map\": [[...], ...]}, one row per MoE layer");
  cmd.add_option("--row-bias", o.row_bias, "Row-parallel bias: full (vLLM/SGLang) or divided (FastDeploy)")
      ->check(CLI::IsMember({"full", "divided"}));
  cmd.add_flag("--no-split-shared-experts", o.no_split_shared_experts,
               "Replicate shared experts whole on every rank");
  cmd.add_option("--dtype", o.dtype, "auto (config torch_dtype), bf16, fp16 or fp32")
      ->check(CLI::IsMember({"auto", "bf16", "bfloat16", "fp16", "float16", "half", "fp32", "float32"}));
  cmd.add_option("--quantization", o.quantization,
                 "none, or fp8: dynamic FP8 per rank tensor for an unquantized checkpoint (an FP8 checkpoint "
                 "stays as it is)")
      ->check(CLI::IsMember({"none", "fp8"}));
}

ParallelConfig ParallelOptions::to_config() const {
  ParallelConfig config;
  config.tp = tp;
  config.ep = ep;
  config.redundant_experts = redundant_experts;
  if (!expert_map_file.empty()) config.expert_map = read_expert_map(expert_map_file);
  config.row_bias = row_bias == "divided" ? RowBias::kDivided : RowBias::kFull;
  config.split_shared_experts = !no_split_shared_experts;
  if (dtype == "bf16" || dtype == "bfloat16") config.dtype = DType::kBF16;
  if (dtype == "fp16" || dtype == "float16" || dtype == "half") config.dtype = DType::kF16;
  if (dtype == "fp32" || dtype == "float32") config.dtype = DType::kF32;
  config.quantize_fp8 = quantization == "fp8";
  return config;
}

}  // namespace shardload::cli
