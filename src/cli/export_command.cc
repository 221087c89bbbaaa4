#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/checkpoint_warnings.h"
#include "cli/commands.h"
#include "cli/export_note.h"
#include "cli/load_admission.h"
#include "cli/distributed_load.h"
#include "cli/model_revision.h"
#include "cli/parallel_options.h"
#include "cli/process_transport.h"
#include "cli/read_options.h"
#include "core/byte_size.h"
#include "core/plural.h"
#include "cli/progress.h"
#include "cli/usage_error.h"
#include "shardload/checkpoint.h"
#include "shardload/export.h"
#include "shardload/distributed.h"
#include "shardload/loader.h"
#include "shardload/mpi_transport.h"
#include "shardload/plan.h"

namespace shardload::cli {
namespace {

struct ExportCommandOptions {
  std::string model;
  std::string revision;
  ParallelOptions parallel;
  std::string out;
  std::string max_file_size = "5G";
  bool overwrite = false;
  std::string engine;
  bool engine_post_processed = false;
  int threads = 0;
  ReadOptions read;
};

// Under mpirun: every node loads its ranks and writes them into the one export.
void run_node_export(const ExportCommandOptions& options, const ParallelConfig& parallel,
                     const ExportOptions& export_options) {
  Transport& transport = process_transport();
  NodeModel model = open_on_every_node(transport, options.model, parallel);
  const ReadAssignment reads = assign_reads(*model.plan, transport.nodes(), options.read.policy());
  LoadOptions load_options;
  load_options.threads = options.threads;
  const std::vector<RankWeights> ranks = load_node(*model.checkpoint, *model.plan, reads, transport, load_options);
  export_node_ranks(*model.checkpoint, *model.plan, ranks, export_options, transport);
  uint64_t mine = 0;
  for (const RankWeights& weights : ranks) mine += weights.buffer.size();
  uint64_t bytes = 0;
  for (const std::string& n : transport.all_gather(std::to_string(mine))) bytes += std::stoull(n);
  if (transport.node() != 0) return;
  std::cout << fmt::format("exported {} of {} (tp={} ep={}) to {} from {} (read {}): {} bytes\n",
                           count_of(model.plan->ranks.size(), "rank"), model.plan->model.architecture,
                           model.plan->parallel.tp, model.plan->parallel.ep, options.out,
                           count_of(static_cast<size_t>(transport.nodes()), "node"),
                           read_policy_name(reads.policy), bytes);
}

void run_export(const ExportCommandOptions& options) {
  refuse_export_as_checkpoint(options.model, "export");
  const ParallelConfig parallel = options.parallel.to_config();
  ExportOptions export_options;
  export_options.out = options.out;
  export_options.max_file_size =
      as_usage_error([&] { return parse_byte_size(options.max_file_size, "--max-file-size"); });
  export_options.overwrite = options.overwrite;
  if (!options.engine.empty()) export_options.engine = *engine_from_name(options.engine);
  export_options.engine_post_processed = options.engine_post_processed;
  // What earlier exports to --out left behind: removed when their process is gone, else named.
  export_options.note = [](const std::string& text) { std::cerr << "note: " + text + "\n"; };
  // Where the export goes is checked before the (long) load, and again by export_ranks before it
  // writes.
  as_usage_error([&] { check_export_target(options.model, export_options); });
  if (launched_by_mpi()) return run_node_export(options, parallel, export_options);

  const Checkpoint ckpt = Checkpoint::open(options.model);
  print_warnings(ckpt);
  const Plan plan = plan_for_flags(ckpt, parallel);
  // What the engine cannot take is said before the (long) load.
  as_usage_error(
      [&] { check_engine_plan(plan, export_options.engine, export_use(export_options)); });
  // Every rank is loaded into memory before the files are written: all of them must fit.
  admit_load(plan, {}, options.threads, IoMode::kAuto);
  LoadOptions load_options;
  load_options.threads = options.threads;
  load_options.progress = make_progress_bar();
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan, load_options);
  finish_progress_bar();
  export_ranks(ckpt, plan, ranks, export_options);
  uint64_t bytes = 0;
  for (const RankWeights& weights : ranks) bytes += weights.buffer.size();
  std::cout << fmt::format("exported {} of {} (tp={} ep={}) to {}: {} bytes\n",
                           count_of(ranks.size(), "rank"), plan.model.architecture,
                           plan.parallel.tp, plan.parallel.ep, options.out, bytes);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto options = std::make_shared<ExportCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write every rank's weights as safetensors files (vLLM sharded_state naming)");
  cmd->footer(
      "Example: shardload export build/tiny-qwen3-moe --tp 4 --ep 2 --engine vllm --out /tmp/tiny-tp4-ep2");
  cmd->add_option("model", options->model,
                  "Model directory, or a Hugging Face model id in the local cache")
      ->required();
  add_revision_option(*cmd, options->revision);
  add_parallel_options(*cmd, options->parallel);
  cmd->add_option(
         "--out", options->out,
         "Output directory, outside the model directory (written beside it, then moved into place)")
      ->required();
  cmd->add_option("--max-file-size", options->max_file_size,
                  "Start a new part past this many bytes (K/M/G suffixes, powers of 1024)");
  cmd->add_flag(
      "--overwrite", options->overwrite,
      "Replace an earlier export in --out (once the new one is complete; other files stay)");
  cmd->add_option("--engine", options->engine,
                  "Write the rank files for this engine's sharded_state loader: its names, buffers "
                  "and dtypes (vllm, sglang; fastdeploy: the layout's own). Default: docs/layout.md")
      ->check(CLI::IsMember(names_of(kEngineNames)));
  cmd->add_flag(
      "--engine-post-processed", options->engine_post_processed,
      "With --engine sglang and an FP8 checkpoint: the FP8 layers as SGLang's "
      "post-processing leaves them on NVIDIA GPUs with FP8 (compute capability 8.9, 9.0), "
      "which its sharded_state loader reads");
  cmd->add_option("--threads", options->threads, "Loader threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  add_read_option(*cmd, options->read);
  add_stall_timeout_option(*cmd);
  cmd->callback([options] {
    options->model = model_at_revision(options->model, options->revision);
    run_export(*options);
  });
}

}  // namespace shardload::cli
