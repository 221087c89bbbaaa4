#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/plural.h"
#include "cli/usage_error.h"
#include "core/byte_size.h"
#include "shardload/tiny.h"

namespace shardload::cli {

void add_make_tiny_command(CLI::App& app) {
  auto options = std::make_shared<TinyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "make-tiny", "Write a small but realistic Hugging Face checkpoint for one architecture family");
  cmd->footer("Example: shardload make-tiny --arch qwen3_moe --quant fp8 --out /tmp/tiny-qwen3-moe-fp8");
  std::string families;
  for (const std::string& arch : tiny_architectures()) families += (families.empty() ? "" : ", ") + arch;
  CLI::Option* arch = cmd->add_option("--arch", options->arch, "Architecture family: " + families);
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->add_option("--seed", options->seed, "Seed of the deterministic values");
  CLI::Option* layers = cmd->add_option("--layers", options->layers, "Number of decoder layers")
                            ->check(CLI::Range(1, 100000));
  CLI::Option* experts =
      cmd->add_option("--experts", options->experts,
                      "Number of routed experts (MoE families only; 0: gemma4 without its MoE block)")
          ->check(CLI::Range(0, 100000));
  // A byte size as every other size flag takes it (K/M/G/T suffixes); 0 is the default, no growth.
  CLI::Option* size =
      cmd->add_option("--size", options->size_bytes,
                      "Grow hidden and intermediate sizes to reach about this many bytes (K/M/G "
                      "suffixes, powers of 1024)")
          ->transform(CLI::Validator(
              [](std::string& text) {
                if (text == "0") return std::string();
                try {
                  text = std::to_string(parse_byte_size(text, "--size"));
                  return std::string();
                } catch (const Error&) {
                  // CLI11 names the option in front of the message.
                  return fmt::format("expected a byte size such as 4096, 150M or 2G, found \"{}\"",
                                     text);
                }
              },
              "SIZE"));
  cmd->add_flag("--overwrite", options->overwrite, "Replace the checkpoint files of a non-empty --out");
  // Checked by make_tiny, so that a bad value gives the same Error(kInvalidArgument) as the API
  // (here a usage error).
  CLI::Option* quant =
      cmd->add_option(
             "--quant", options->quant,
             "Weight format: none (bf16), fp8 (per-tensor scales, AutoFP8/vLLM), fp8-block "
             "(128x128 block scales, DeepSeek-V3; block-aligned default sizes, no --size), or "
             "llm-compressor's compressed-tensors FP8: ct-fp8-tensor, ct-fp8-channel, ct-fp8-block; "
             "mxfp4 (gpt_oss only: its experts as the Hub stores them); llm-compressor's integer and FP4 "
             "weights: ct-w4a16, ct-w4a16-asym, ct-w8a16, ct-w8a8, ct-nvfp4; GPTQ int4: gptq (32-value "
             "groups), gptq-channel; AWQ int4 (GEMM, zero points): awq; NVIDIA ModelOpt's NVFP4: "
             "modelopt-nvfp4")
          ->capture_default_str();
  CLI::Option* scheme = cmd->add_option(
      "--activation-scheme", options->activation_scheme,
      "With --quant fp8 or ct-fp8-tensor: static (default; an input_scale per projection) or dynamic");
  CLI::Option* every_layer_moe = cmd->add_flag(
      "--every-layer-moe", options->every_layer_moe,
      "MoE families: every decoder layer MoE (no dense layers), as real Qwen3-MoE checkpoints are");
  CLI::Option* sparse = cmd->add_flag(
      "--sparse", options->sparse,
      "Write headers and index only: tensor data are holes (zeros, no disk blocks), for planning");
  CLI::Option* config = cmd->add_option(
      "--config", options->config,
      "A real model's config.json: its family, full shapes and quantization, in ~5 GB shards; "
      "needs --sparse, excludes --arch/--layers/--experts/--size/--quant/--activation-scheme/"
      "--every-layer-moe");
  config->needs(sparse);
  for (CLI::Option* sizing : {arch, layers, experts, size, quant, scheme, every_layer_moe})
    config->excludes(sizing);
  cmd->callback([options, arch, config] {
    if (arch->count() == 0 && config->count() == 0) {
      throw UsageError("make-tiny needs --arch or --config");
    }
    // Every kInvalidArgument of make_tiny is about its options (family, counts, --out): a usage
    // error.
    const TinySummary summary = as_usage_error([&] { return make_tiny(*options); });
    std::cout << fmt::format("wrote {}: {}, {} bytes in {}\n", summary.dir,
                             count_of(summary.tensors, "tensor"), summary.bytes,
                             count_of(summary.files, "file"));
  });
}

}  // namespace shardload::cli
