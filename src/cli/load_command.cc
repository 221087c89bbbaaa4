#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/checkpoint_warnings.h"
#include "cli/checksum_lines.h"
#include "cli/distributed_load.h"
#include "cli/load_admission.h"
#include "cli/commands.h"
#include "cli/model_revision.h"
#include "cli/parallel_options.h"
#include "cli/process_transport.h"
#include "cli/read_options.h"
#include "core/plural.h"
#include "cli/usage_error.h"
#include "cli/progress.h"
#include "core/seconds_since.h"
#include "shardload/checkpoint.h"
#include "shardload/device.h"
#include "shardload/export.h"
#include "shardload/loader.h"
#include "shardload/mpi_transport.h"
#include "shardload/plan.h"

namespace shardload::cli {
namespace {

struct LoadCommandOptions {
  std::string model;
  std::string revision;
  ParallelOptions parallel;
  int rank = -1;
  bool checksum = false;
  int threads = 0;
  IoMode io = IoMode::kAuto;
  ReadOptions read;
  bool json = false;
  std::string device = "cpu";  // cpu or cuda (docs/gpu.md)
  std::string device_map;      // GPU of each rank loaded ("0,0,1,1"); empty: rank % GPUs
};

// The ranks on GPUs when --device cuda, else nothing: a machine without a usable GPU is an
// Error(kDevice) (exit 1) before anything is read. A --device-map that is malformed or does not
// name one GPU for each of the `ranks` loaded is the command line's mistake (exit 2), found first,
// GPU or not; only its GPU indices need the GPUs to check (assign_devices).
bool on_device(const LoadCommandOptions& options, size_t ranks) {
  const std::vector<int> map = as_usage_error([&] { return parse_device_map(options.device_map); });
  if (parse_device_kind(options.device) == DeviceKind::kCpu) {
    if (!map.empty()) throw UsageError("--device-map needs --device cuda");
    return false;
  }
  if (!map.empty() && map.size() != ranks) {
    throw UsageError(fmt::format("--device-map names {} for {}: it needs one GPU per rank loaded",
                                 count_of(map.size(), "GPU"), count_of(ranks, "rank")));
  }
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw Error(ErrorKind::kDevice, fmt::format("--device cuda: {}", why));
  return true;
}

// A device rank copied back to the host: what --checksum hashes (the bytes the GPU holds).
RankWeights to_host(const DeviceRankWeights& weights) {
  RankWeights out{weights.rank, AlignedBuffer(weights.buffer.size()), weights.processed};
  weights.buffer.copy_to_host(0, out.buffer.span());
  return out;
}


std::string rate(uint64_t bytes, double seconds) {
  return seconds > 0 ? fmt::format("{:.2f} GB/s", static_cast<double>(bytes) / seconds / 1e9) : "-";
}

// What the layout flags given ask of an export (flags not given take the export's).
ExportLayout asked_layout(const ParallelOptions& flags) {
  const ParallelConfig config = flags.to_config();
  ExportLayout layout;
  if (flags.given("--tp")) layout.tp = config.tp;
  if (flags.given("--ep")) layout.ep = config.ep;
  layout.ep_equals_tp = flags.enable_expert_parallel;
  if (flags.given("--redundant-experts")) layout.redundant_experts = config.redundant_experts;
  if (flags.given("--expert-map")) layout.expert_map = config.expert_map;
  if (flags.given("--row-bias")) layout.row_bias = config.row_bias;
  if (flags.given("--no-split-shared-experts") || flags.given("--moe-a2a-backend"))
    layout.split_shared_experts = config.split_shared_experts;
  if (flags.moe_a2a_backend == "deepep") layout.ep_equals_tp = true;
  if (flags.given("--dp")) layout.dp = config.dp;
  if (flags.given("--dp-style")) layout.dp_style = config.dp_style;
  if (flags.given("--enable-dp-lm-head")) layout.dp_lm_head = config.dp_lm_head;
  if (flags.given("--moe-dense-tp-size")) layout.replicate_dense_mlp = config.replicate_dense_mlp;
  if (config.dtype) layout.dtype = config.dtype;
  if (flags.given("--quantization")) layout.quantize_fp8 = config.quantize_fp8;
  return layout;
}

// The flags with, when --tp is not given, the export's tp in its place: flags whose meaning
// depends on tp (--moe-dense-tp-size, --enable-expert-parallel, --moe-a2a-backend) are resolved
// against the export's layout, not the default tp of 1. A manifest without a usable tp_size is
// left to load_export to report.
ParallelOptions with_export_tp(const ParallelOptions& flags, const std::string& dir) {
  ParallelOptions out = flags;
  if (flags.given("--tp")) return out;
  const nlohmann::json manifest = read_export_manifest(dir);
  const auto tp = manifest.find("tp_size");
  if (tp != manifest.end() && tp->is_number_integer() && tp->get<int64_t>() >= 1 &&
      tp->get<int64_t>() <= std::numeric_limits<int>::max())
    out.tp = static_cast<int>(tp->get<int64_t>());
  return out;
}

void run_load_export(const LoadCommandOptions& options) {
  const ParallelOptions parallel = with_export_tp(options.parallel, options.model);
  const ExportLayout layout = asked_layout(parallel);
  const bool device = on_device(options, options.rank >= 0 ? 1 : static_cast<size_t>(parallel.tp));
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> ranks;
  if (options.rank >= 0) ranks.push_back(options.rank);
  // Flags that do not fit the export, and a --rank outside it, are usage errors; a broken export is
  // not.
  const LoadedExport loaded =
      as_usage_error([&] { return load_export(options.model, ranks, options.threads, layout); });
  // --device cuda: each rank file's buffer uploaded through pinned staging, and hashed from the GPU.
  std::vector<DeviceBuffer> device_ranks;
  if (device) {
    std::vector<std::span<const std::byte>> buffers;
    std::vector<int> rank_ids;
    for (const LoadedExport::Rank& rank : loaded.ranks) {
      buffers.push_back(rank.buffer.span());
      rank_ids.push_back(rank.rank);
    }
    const std::vector<int> devices = as_usage_error([&] {
      return assign_devices(rank_ids, cuda_device_count(), parse_device_map(options.device_map));
    });
    device_ranks = upload_buffers(buffers, devices);
  }
  const double seconds = seconds_since(start);
  uint64_t bytes = 0;
  ChecksumLines checksums;
  for (size_t i = 0; i < loaded.ranks.size(); ++i) {
    const LoadedExport::Rank& rank = loaded.ranks[i];
    AlignedBuffer back;
    std::span<const std::byte> held = rank.buffer.span();
    if (options.checksum && !device_ranks.empty()) {
      back = AlignedBuffer(device_ranks[i].size());
      device_ranks[i].copy_to_host(0, back.span());
      held = back.span();
    }
    for (const LoadedExport::Tensor& t : rank.tensors) {
      bytes += t.nbytes;
      if (options.checksum) {
        checksums.add(rank.rank, t.name, t.dtype, t.shape,
                      held.subspan(t.offset, t.nbytes));
      }
    }
    checksums.print();
  }
  std::cout << fmt::format("loaded export {}: {}, {} bytes, load {:.3f} s ({})\n", options.model,
                           count_of(loaded.ranks.size(), "rank"), bytes, seconds,
                           rate(bytes, seconds));
}

void run_node_load(const LoadCommandOptions& options) {
  if (is_export_dir(options.model)) {
    throw UsageError("an export loads in one process: run it without mpirun (each rank file is its own)");
  }
  if (options.rank >= 0) throw UsageError("--rank loads one rank in one process: run it without mpirun");
  if (options.device != "cpu") throw UsageError("--device cuda loads in one process: run it without mpirun");
  DistributedLoadRequest request;
  request.model = options.model;
  request.parallel = options.parallel.to_config();
  request.read = options.read.policy();
  request.checksum = options.checksum;
  request.json = options.json;
  request.load.threads = options.threads;
  request.load.io = options.io;
  run_distributed_load(request);
}

void run_load(const LoadCommandOptions& options) {
  if (launched_by_mpi()) return run_node_load(options);
  if (is_export_dir(options.model)) return run_load_export(options);
  const ParallelConfig parallel = options.parallel.to_config();
  // The load as an engine sees it: from opening the checkpoint to weights in place, without the
  // process's start and exit, which an engine pays once whatever it loads (bench/run times this).
  // The layout's ranks are tp of them (make_plan checks that tp fits the model).
  const bool device = on_device(options, options.rank >= 0 ? 1 : static_cast<size_t>(parallel.tp));
  const auto load_start = std::chrono::steady_clock::now();
  auto start = load_start;
  const Checkpoint ckpt = Checkpoint::open(options.model);
  print_warnings(ckpt);
  const double open_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const Plan plan = plan_for_flags(ckpt, parallel);
  const double plan_seconds = seconds_since(start);
  if (options.rank >= static_cast<int>(plan.ranks.size())) {
    throw UsageError(fmt::format("--rank {} is outside the layout's {}", options.rank,
                                 count_of(plan.ranks.size(), "rank")));
  }

  // On GPUs the host holds only the staging buffers.
  if (!device) {
    admit_load(plan, options.rank >= 0 ? std::vector<int>{options.rank} : std::vector<int>{},
               options.threads, options.io);
  }

  LoadOptions load_options;
  load_options.threads = options.threads;
  load_options.io = options.io;
  if (options.rank >= 0) load_options.ranks.push_back(options.rank);
  load_options.progress = make_progress_bar();
  LoadStats stats;
  std::vector<RankWeights> ranks;
  std::vector<DeviceRankWeights> device_ranks;
  DeviceLoadStats device_stats;
  if (device) {
    DeviceLoadOptions device_options;
    // A device map that does not fit the ranks loaded is a usage error, found before any read.
    device_options.device_map = as_usage_error([&] {
      std::vector<int> loaded = load_options.ranks;
      if (loaded.empty()) {
        for (const RankPlan& rank : plan.ranks) loaded.push_back(rank.rank);
      }
      return assign_devices(loaded, cuda_device_count(), parse_device_map(options.device_map));
    });
    device_ranks =
        load_ranks_to_device(ckpt, plan, load_options, device_options, &stats, &device_stats);
  } else {
    ranks = load_ranks(ckpt, plan, load_options, &stats);
  }
  const double load_seconds = seconds_since(load_start);
  finish_progress_bar();
  const size_t rank_count = device ? device_ranks.size() : ranks.size();

  if (options.checksum) {
    for (const RankWeights& weights : ranks) std::cout << rank_checksums(plan, weights);
    for (const DeviceRankWeights& weights : device_ranks)
      std::cout << rank_checksums(plan, to_host(weights));
  }
  // The checkpoint bytes the plan uses: a full load reads exactly these, each once, however many
  // ranks hold a replicated or attention-scoped tensor.
  uint64_t source_bytes = 0;
  for (const PlanSource& source : plan.sources)
    source_bytes += shape_nbytes(source.shape, source.dtype);
  const std::string dp =
      plan.parallel.has_dp_fields() ? fmt::format(" dp={}", plan.parallel.dp) : std::string();
  if (options.json) {
    // The fields of a node's summary under mpirun (docs/distributed.md), for one process.
    const auto gbps = [&](uint64_t bytes) {
      return stats.seconds_copy > 0 ? bytes / stats.seconds_copy / 1e9 : 0.0;
    };
    nlohmann::json summary{{"ranks", rank_count},
                                {"bytes_needed", source_bytes},
                                {"bytes_read", stats.bytes_read},
                                {"bytes_written", stats.bytes_written},
                                {"io", io_mode_name(stats.io)},
                                {"read_requests", stats.read_requests},
                                {"seconds", load_seconds},
                                {"seconds_copy", stats.seconds_copy},
                                {"seconds_postprocess", stats.seconds_postprocess},
                                {"read_gbps", gbps(stats.bytes_read)},
                                {"write_gbps", gbps(stats.bytes_written)}};
    if (device) {
      summary["device"] = "cuda";
      summary["staging_bytes"] = device_stats.staging_bytes;
      summary["windows"] = device_stats.windows;
      summary["seconds_fill"] = device_stats.seconds_fill;
      summary["seconds_wait"] = device_stats.seconds_wait;
    }
    std::cout << summary.dump(1) << "\n";
  } else {
    std::cout << fmt::format(
        "loaded {} of {} (tp={} ep={}{}): read {} bytes (of {} in the checkpoint's planned "
        "tensors), "
        "wrote {} bytes; open {:.3f} s, plan {:.3f} s, "
        "allocate {:.3f} s, copy {:.3f} s ({} read, {} written, {} reads, io {}), "
        "postprocess {:.3f} s; total {:.4f} s{}\n",
        count_of(rank_count, "rank"), plan.model.architecture, plan.parallel.tp, plan.parallel.ep,
        dp, stats.bytes_read, source_bytes, stats.bytes_written, open_seconds, plan_seconds,
        stats.seconds_allocate, stats.seconds_copy, rate(stats.bytes_read, stats.seconds_copy),
        rate(stats.bytes_written, stats.seconds_copy), stats.read_requests, io_mode_name(stats.io),
        stats.seconds_postprocess, load_seconds,
        device ? fmt::format("; on GPUs through {} MiB of pinned staging in {} windows",
                             device_stats.staging_bytes >> 20, device_stats.windows)
               : std::string());
  }
  // The process ends here: freeing the checkpoint's and the plan's tens of thousands of names and
  // pieces one by one took ~7 ms of a 20k-tensor load (0.25 s), and the kernel takes the pages
  // back at exit anyway. Only the output needs finishing.
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(0);
}

}  // namespace

void add_load_command(CLI::App& app) {
  auto options = std::make_shared<LoadCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "load", "Load every rank (or one) of a layout into memory; an export directory loads directly");
  cmd->footer("Example: shardload load build/tiny-qwen3-moe --tp 4 --ep 2 --checksum");
  cmd->add_option("model", options->model,
                  "Model directory, Hugging Face model id in the local cache, or shardload export")
      ->required();
  add_revision_option(*cmd, options->revision);
  add_parallel_options(*cmd, options->parallel);
  cmd->add_option("--rank", options->rank, "Load only this rank")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--checksum", options->checksum,
                "Print XXH3-64 of each rank tensor: rank, name, dtype, shape, hash");
  cmd->add_option("--threads", options->threads, "Loader threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  std::map<std::string, IoMode> io_modes;
  std::string names;
  for (const auto& [mode, name] : kIoModeNames) {
    io_modes.emplace(name, mode);
    names += (names.empty() ? "" : ",") + std::string(name);
  }
  // The help shows the names only (a transformer's own description would list name->enum pairs).
  cmd->add_option(
         "--io", options->io,
         "Read path: auto (pread when the files are in the page cache, else direct), pread, "
         "mmap, or direct (O_DIRECT with io_uring)")
      ->transform(
          CLI::CheckedTransformer(io_modes, CLI::ignore_case).description("{" + names + "}"));
  add_read_option(*cmd, options->read);
  add_stall_timeout_option(*cmd);
  cmd->add_option("--device", options->device,
                  "Where the ranks go: cpu (host memory) or cuda (one GPU allocation per rank, "
                  "filled through pinned staging buffers; docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--device-map", options->device_map,
                  "With --device cuda: the GPU of each rank loaded, comma-separated (default: rank "
                  "% visible GPUs)");
  cmd->add_flag("--json", options->json,
                "Print the summary as JSON (under mpirun: every node's bytes read, sent, received, "
                "written and GB/s per stage)");
  cmd->callback([options] {
    options->model = model_at_revision(options->model, options->revision);
    run_load(*options);
  });
}

}  // namespace shardload::cli
