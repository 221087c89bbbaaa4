// make_tiny: lays a generated model out as a Hugging Face checkpoint directory.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tensor.h"
#include "shardload/tiny.h"
#include "tiny/tiny_config.h"
#include "tiny/tiny_files.h"
#include "tiny/tiny_from_config.h"
#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"
#include "tiny/tiny_shards.h"
#include "tiny/tiny_values.h"

namespace shardload {

namespace fs = std::filesystem;
using tiny::TensorSpec;

namespace {

constexpr const char* kIndexFile = "model.safetensors.index.json";
// Guards against a typo in --size: 1 TiB is far beyond any test or benchmark model.
constexpr uint64_t kMaxSizeBytes = uint64_t{1} << 40;
// --config: shards of at most about this many bytes, Hugging Face's default max_shard_size "5GB".
constexpr uint64_t kHubShardBytes = 5'000'000'000;
// --config: catches a config with a typo in a size (the largest real models are about 2 TB).
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 40;

// Creates `out`, or empties what an earlier run left there (only with overwrite).
void prepare_output(const fs::path& out, bool overwrite) {
  std::error_code ec;
  const fs::file_status status = fs::status(out, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      throw Error(ErrorKind::kInvalidArgument, "output path exists and is not a directory",
                  {.file = out.string()});
    }
    if (fs::is_empty(out, ec)) return;
    if (!overwrite) {
      throw Error(ErrorKind::kInvalidArgument, "output directory is not empty (use --overwrite)",
                  {.file = out.string()});
    }
    // Stale shards of another shard count would otherwise sit beside the new ones.
    for (const fs::directory_entry& entry : fs::directory_iterator(out, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".safetensors" || name == kIndexFile ||
          name == "config.json") {
        fs::remove(entry.path(), ec);
        if (ec) {
          throw Error(ErrorKind::kIo, "cannot remove old file: " + ec.message(),
                      {.file = entry.path().string()});
        }
      }
    }
    return;
  }
  fs::create_directories(out, ec);
  if (ec) {
    throw Error(ErrorKind::kIo, "cannot create directory: " + ec.message(), {.file = out.string()});
  }
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  if (!file) throw Error(ErrorKind::kIo, "cannot write file", {.file = path.string()});
}

// One shard's tensors, generated into a buffer of their own, ready to write.
struct Shard {
  fs::path path;
  AlignedBuffer buffer;
  std::vector<TensorToWrite> tensors;  // views into buffer, which keeps its address when moved
};

Shard generate_shard(fs::path path, const std::vector<TensorSpec>& tensors,
                     const std::vector<uint64_t>& sizes, const std::vector<size_t>& members,
                     uint64_t seed) {
  uint64_t bytes = 0;
  for (size_t i : members) bytes += sizes[i];
  Shard shard{.path = std::move(path), .buffer = AlignedBuffer(bytes), .tensors = {}};
  std::vector<tiny::FillJob> jobs;
  std::vector<tiny::FillJob> fp8_jobs;  // FP8 weights and scales, derived from bf16 values
  uint64_t offset = 0;
  for (size_t i : members) {
    const std::span<std::byte> out = shard.buffer.span().subspan(offset, sizes[i]);
    (tensors[i].quant == tiny::Quant::kNone ? jobs : fp8_jobs).push_back({&tensors[i], out});
    shard.tensors.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape, out});
    offset += sizes[i];
  }
  tiny::fill_values(jobs, seed);
  tiny::fill_quantized(fp8_jobs, seed);
  return shard;
}

// Writes the shards, generating the next one while the previous one is written and synced, so that
// the CPU work hides behind the disk; at most two shards are in memory at a time.
void write_shards(const fs::path& out, const std::vector<TensorSpec>& tensors,
                  const std::vector<uint64_t>& sizes,
                  const std::vector<std::vector<size_t>>& shards, uint64_t seed) {
  std::future<void> writing;
  for (size_t k = 0; k < shards.size(); ++k) {
    Shard shard =
        generate_shard(out / tiny::shard_name(k, shards.size()), tensors, sizes, shards[k], seed);
    if (writing.valid()) writing.get();
    writing = std::async(std::launch::async, [shard = std::move(shard)] {
      write_safetensors(shard.path.string(), shard.tensors, {{"format", "pt"}});
    });
  }
  if (writing.valid()) writing.get();
}

// The same files with headers only: each data section a hole, nothing generated.
void write_sparse_shards(const fs::path& out, const std::vector<TensorSpec>& tensors,
                         const std::vector<std::vector<size_t>>& shards) {
  for (size_t k = 0; k < shards.size(); ++k) {
    std::vector<TensorToWrite> headers;
    headers.reserve(shards[k].size());
    for (size_t i : shards[k]) {
      headers.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape, {}});
    }
    write_sparse_safetensors((out / tiny::shard_name(k, shards.size())).string(), headers,
                             {{"format", "pt"}});
  }
}

// --quant and --activation-scheme, checked together: the scheme belongs to per-tensor FP8 only.
tiny::Quant parse_quant_options(const TinyOptions& options, bool& static_activations) {
  const std::optional<tiny::Quant> quant = tiny::parse_quant(options.quant);
  if (!quant) {
    throw Error(ErrorKind::kInvalidArgument, "unknown quantization",
                {.field = "quant",
                 .expected = fmt::format("one of {}", fmt::join(tiny::quant_names(), ", ")),
                 .found = options.quant});
  }
  const std::string& scheme = options.activation_scheme;
  // Static activation scales go with per-tensor weights only (the engines refuse the others).
  if (!scheme.empty() && *quant != tiny::Quant::kFp8 && *quant != tiny::Quant::kCtTensor) {
    throw Error(ErrorKind::kInvalidArgument, "an activation scheme needs --quant fp8 or ct-fp8-tensor",
                {.field = "activation-scheme",
                 .expected = "--quant fp8 or ct-fp8-tensor",
                 .found = fmt::format("--quant {}", options.quant)});
  }
  if (!scheme.empty() && scheme != "static" && scheme != "dynamic") {
    throw Error(ErrorKind::kInvalidArgument, "unknown activation scheme",
                {.field = "activation-scheme", .expected = "static or dynamic", .found = scheme});
  }
  static_activations = scheme != "dynamic";
  return *quant;
}

}  // namespace

bool tiny_writes_fp8(std::string_view arch) {
  const arch::Family* family = arch::find_family(arch);
  return family != nullptr && family->no_fp8_checkpoints.empty();
}

const std::vector<std::string>& tiny_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const arch::Family* family : arch::families()) out.emplace_back(family->name);
    return out;
  }();
  return names;
}

namespace {

// --arch and the options that size the generated model.
tiny::TinyModel model_from_options(const TinyOptions& options) {
  const arch::Family* family = arch::find_family(options.arch);
  if (family == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, "unknown architecture family",
                {.field = "arch",
                 .expected = fmt::format("one of {}", fmt::join(tiny_architectures(), ", ")),
                 .found = options.arch});
  }
  bool static_activations = true;
  const tiny::Quant quant = parse_quant_options(options, static_activations);
  if (quant == tiny::Quant::kMxfp4 && !family->tiny_mxfp4) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} has no MXFP4 checkpoints (gpt_oss has)", family->name),
                {.field = "quant", .expected = "none or an FP8 format", .found = options.quant});
  }
  if (quant != tiny::Quant::kNone && quant != tiny::Quant::kMxfp4 && !family->no_fp8_checkpoints.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} has no FP8 checkpoints here: {}", family->name, family->no_fp8_checkpoints),
                {.field = "quant", .expected = "none (--quantization fp8 at load time quantizes dynamically)",
                 .found = options.quant});
  }
  tiny::TinyModel model = tiny::is_block_quant(quant) ? tiny::block_fp8_model(*family)
                                                      : tiny::default_model(*family);
  tiny::apply_counts(model, options.layers, options.experts);
  if (options.every_layer_moe) {
    if (model.experts == 0) {
      throw Error(ErrorKind::kInvalidArgument, "a dense family has no MoE layers",
                  {.field = "every-layer-moe", .expected = "an MoE family", .found = std::string(family->name)});
    }
    model.mlp_only_layers.clear();
    model.first_moe_layer = 0;
  }
  if (options.size_bytes > kMaxSizeBytes) {
    throw Error(ErrorKind::kInvalidArgument, "size too large",
                {.field = "size",
                 .expected = fmt::format("at most {} bytes", kMaxSizeBytes),
                 .found = std::to_string(options.size_bytes)});
  }
  if (options.size_bytes > 0 && quant == tiny::Quant::kMxfp4) {
    // Growing the sizes would break the multiples of 32 that MXFP4's groups need.
    throw Error(ErrorKind::kInvalidArgument, "--size cannot be combined with --quant mxfp4",
                {.field = "size", .expected = "no --size with mxfp4", .found = std::to_string(options.size_bytes)});
  }
  if (options.size_bytes > 0 && tiny::is_block_quant(quant)) {
    // Growing the sizes would break the 128-multiples that every TP split of block FP8 needs.
    throw Error(ErrorKind::kInvalidArgument, "--size cannot be combined with --quant fp8-block",
                {.field = "size",
                 .expected = "no --size with fp8-block",
                 .found = std::to_string(options.size_bytes)});
  }
  model.quant = quant;  // before scaling, so that the byte count is that of the FP8 tensors
  model.mxfp4_experts = quant == tiny::Quant::kMxfp4;
  model.static_activations = static_activations;
  if (options.size_bytes > 0) tiny::scale_to_size(model, options.size_bytes);
  if (options.size_bytes > 0 && tiny::is_packed_int(quant)) {
    // Integer weights' 32-value groups must survive every TP split up to 4 of every projection's inputs.
    const auto whole_groups = [](uint64_t& size) {
      constexpr uint64_t kGranule = 4 * tiny::kTinyIntGroup;
      size = (size + kGranule - 1) / kGranule * kGranule;
    };
    for (uint64_t* size : {&model.hidden, &model.intermediate, &model.moe_intermediate, &model.shared_intermediate}) {
      if (*size > 0) whole_groups(*size);
    }
  }
  return model;
}

// --config FILE: the model of a real config.json, whose text is kept for the output's config.json.
tiny::TinyModel model_from_config(const TinyOptions& options, std::string& text) {
  const std::pair<bool, const char*> conflicts[] = {
      {!options.arch.empty(), "arch"},    {options.layers != -1, "layers"},
      {options.experts != -1, "experts"}, {options.size_bytes > 0, "size"},
      {options.quant != "none", "quant"}, {!options.activation_scheme.empty(), "activation-scheme"},
      {options.every_layer_moe, "every-layer-moe"},
  };
  for (const auto& [given, name] : conflicts) {
    if (!given) continue;
    throw Error(ErrorKind::kInvalidArgument, "--config decides the model: no other sizing option",
                {.field = name, .expected = fmt::format("--config without --{}", name)});
  }
  if (options.out.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "no output directory", {.field = "out"});
  }
  if (!options.sparse) {
    // Values for a real model's hundreds of GB are not wanted: the sizes are for planning.
    throw Error(ErrorKind::kInvalidArgument, "--config needs --sparse",
                {.field = "sparse", .expected = "--config with --sparse"});
  }
  text =
      read_bounded_file(options.config, ErrorKind::kConfig, kConfigJsonLimits.max_bytes, "config");
  const nlohmann::json config =
      parse_json(text, ErrorKind::kConfig, options.config, kConfigJsonLimits);
  return tiny::model_from_config(config, options.config);
}

}  // namespace

nlohmann::json make_tiny_config(const TinyOptions& options) {
  return tiny::config_json(model_from_options(options));
}

TinySummary make_tiny(const TinyOptions& options) {
  if (options.config.empty() && options.out.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "no output directory", {.field = "out"});
  }
  std::string config_text;
  const tiny::TinyModel model = options.config.empty() ? model_from_options(options)
                                                       : model_from_config(options, config_text);
  const std::vector<TensorSpec> tensors = tiny::model_tensors(model);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const TensorSpec& spec : tensors) {
    sizes.push_back(shape_nbytes(spec.shape, spec.dtype));
    if (__builtin_add_overflow(total, sizes.back(), &total) || total > kMaxConfigBytes) {
      throw Error(
          ErrorKind::kConfig, "model too large for make-tiny",
          {.file = options.config, .expected = fmt::format("at most {} bytes", kMaxConfigBytes)});
    }
  }

  const fs::path out(options.out);
  prepare_output(out, options.overwrite);
  const std::vector<std::vector<size_t>> shards =
      tiny::plan_shards(sizes, options.config.empty() ? tiny::kShardBytes : kHubShardBytes);
  if (options.sparse) {
    write_sparse_shards(out, tensors, shards);
  } else {
    write_shards(out, tensors, sizes, shards, options.seed);
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    for (size_t i : shards[k]) weight_map[tensors[i].name] = tiny::shard_name(k, shards.size());
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text(out / kIndexFile, index.dump(2));
  write_text(out / "config.json",
             options.config.empty() ? tiny::config_json(model).dump(2) : config_text);
  // A real config's token ids are not the generated tokenizer's: no tokenizer files then.
  const std::map<std::string, std::string> extra =
      options.config.empty() ? tiny::tokenizer_files(model) : std::map<std::string, std::string>{};
  for (const auto& [name, text] : extra) write_text(out / name, text);

  return {.dir = out.string(),
          .files = shards.size() + 2 + extra.size(),
          .shards = shards.size(),
          .tensors = tensors.size(),
          .bytes = total};
}

}  // namespace shardload
