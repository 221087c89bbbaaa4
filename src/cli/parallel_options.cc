#include "cli/parallel_options.h"

#include <fmt/format.h>

#include "cli/usage_error.h"
#include "core/torch_dtype.h"
#include "shardload/error.h"

namespace shardload::cli {

void add_parallel_options(CLI::App& cmd, ParallelOptions& o) {
  o.command = &cmd;
  cmd.add_option("--tensor-parallel-size,--tp,--tp-size", o.tp, "Tensor-parallel size T (ranks)");
  cmd.add_option("--expert-parallel-size,--ep,--ep-size", o.ep, "Expert-parallel size (divides T)");
  cmd.add_flag("--enable-expert-parallel", o.enable_expert_parallel,
               "Expert parallelism over all T ranks (the same as --ep T)");
  cmd.add_option("--redundant-experts", o.redundant_experts, "Redundant (replica) experts R");
  cmd.add_option("--expert-map", o.expert_map_file,
                 "JSON file {\"physical_to_logical_map\": [[...], ...]}, one row per MoE layer");
  cmd.add_option("--row-bias", o.row_bias, "Row-parallel bias: full (vLLM/SGLang) or divided (FastDeploy)")
      ->check(CLI::IsMember(names_of(kRowBiasNames)));
  cmd.add_flag("--no-split-shared-experts", o.no_split_shared_experts,
               "Replicate shared experts whole on every rank");
  cmd.add_option("--data-parallel-size,--dp,--dp-size", o.dp,
                 "Attention data-parallel size D (divides T): attention split over T/D ranks");
  cmd.add_flag("--enable-dp-attention", o.enable_dp_attention,
               "SGLang's data-parallel attention (implied by --dp > 1)");
  cmd.add_flag("--enable-dp-lm-head", o.enable_dp_lm_head,
               "Split lm_head over the attention group (T/D ranks) instead of all T");
  cmd.add_option("--moe-dense-tp-size", o.moe_dense_tp_size,
                 "1: dense-layer MLPs whole on every rank (SGLang's only other value than T)");
  cmd.add_option("--dp-style", o.dp_style,
                 "sglang (DP attention: embeddings replicated, dense MLP and lm_head over T) or vllm "
                 "(each DP replica holds every non-expert group over its T/D ranks)")
      ->check(CLI::IsMember(names_of(kDpStyleNames)));
  cmd.add_option("--moe-a2a-backend", o.moe_a2a_backend,
                 "none, or deepep: experts over all T ranks (--ep T) and shared experts replicated, as "
                 "SGLang sets them for DeepEP")
      ->check(CLI::IsMember({"none", "deepep"}));
  cmd.add_option("--dtype", o.dtype,
                 "auto (config torch_dtype), bfloat16 (bf16), float16 (fp16, half) or float32 "
                 "(fp32, float)")
      ->check(CLI::Validator(
          [](const std::string& name) {
            return name == "auto" || model_dtype_from_flag(name) ? std::string()
                                                           : "not a model dtype: " + name;
          },
          "", "DTYPE"));
  cmd.add_option("--quantization", o.quantization,
                 "none, or fp8: dynamic FP8 per rank tensor for an unquantized checkpoint (an FP8 checkpoint "
                 "stays as it is)")
      ->check(CLI::IsMember({"none", "fp8"}));
}

bool ParallelOptions::given(std::string_view flag) const {
  return command != nullptr && command->count(std::string(flag)) > 0;
}

ParallelConfig ParallelOptions::to_config() const {
  ParallelConfig config;
  config.tp = tp;
  config.ep = ep;
  config.redundant_experts = redundant_experts;
  if (!expert_map_file.empty()) config.expert_map = read_expert_map(expert_map_file);
  config.row_bias = row_bias_from_name(row_bias).value();  // CLI11 checked it is one
  config.split_shared_experts = !no_split_shared_experts;
  if (dtype != "auto") config.dtype = model_dtype_from_flag(dtype);
  config.quantize_fp8 = quantization == "fp8";
  config.dp = dp;
  config.dp_style = dp_style_from_name(dp_style).value();
  config.dp_lm_head = enable_dp_lm_head;
  // Flags given together that disagree are a usage error.
  as_usage_error([&] {
    apply_engine_flags({.enable_expert_parallel = enable_expert_parallel,
                        .moe_a2a_backend = moe_a2a_backend,
                        .moe_dense_tp_size = moe_dense_tp_size,
                        .ep_given = given("--ep")},
                       config);
  });
  return config;
}

Plan plan_for_flags(const Checkpoint& checkpoint, const ParallelConfig& parallel) {
  return as_usage_error([&] { return make_plan(checkpoint, parallel); });
}

}  // namespace shardload::cli
