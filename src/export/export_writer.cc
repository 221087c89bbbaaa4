// Writes an export as docs/layout.md specifies: vLLM sharded_state file names, per-file metadata,
// the shardload.json manifest, and the model directory's other top-level files copied unchanged.
#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fault_injection.h"
#include "core/plural.h"
#include "core/shape_text.h"
#include "core/transpose.h"
#include "core/json_input.h"
#include "export/engine_config.h"
#include "export/engine_tensors.h"
#include "export/export_steps.h"
#include "export/recorded_layout.h"
#include "export/resolved_path.h"
#include "export/staging_dir.h"
#include "shardload/convert.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/safetensors.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kManifest = "shardload.json";

bool is_rank_file(const std::string& name) {
  return name.starts_with("model-rank-") && name.ends_with(".safetensors");
}

// Files of the checkpoint directory copied beside the export: config, tokenizer, generation files.
bool is_copied(const fs::directory_entry& entry) {
  if (!entry.is_regular_file()) return false;
  const std::string ext = entry.path().extension().string();
  const std::string name = entry.path().filename().string();
  return ext != ".safetensors" && ext != ".bin" && ext != ".pt" && ext != ".pth" &&
         name != "model.safetensors.index.json";
}

// What an --overwrite keeps of the old directory: everything but an export's own rank files and
// manifest (the files copied from the model come anew with the export).
bool kept_on_overwrite(const std::string& name) { return !is_rank_file(name) && name != kManifest; }

// An export holds every rank of its layout, in rank order: a load checks exactly that.
void check_all_ranks(const Plan& plan, const std::vector<RankWeights>& ranks) {
  bool in_order = ranks.size() == plan.ranks.size();
  for (size_t r = 0; in_order && r < ranks.size(); ++r)
    in_order = ranks[r].rank == static_cast<int>(r);
  if (!in_order) {
    throw Error(ErrorKind::kInvalidArgument, "an export holds every rank of the layout, in order",
                {.expected = fmt::format("ranks 0..{}", plan.ranks.size() - 1),
                 .found = count_of(ranks.size(), "rank")});
  }
}

// The alignment of the small tensors an export makes (scales, buffers, cast norms): a cache line,
// not AlignedBuffer's page, which would spend 4 KiB on each of a model's thousands.
constexpr size_t kMadeAlignment = 64;

// A post-processed export's tensor made of its parameter's bytes `data` (EngineReduce): a weight
// transposed (into an AlignedBuffer: huge pages, which this new memory faults in 512x less often than
// a vector's), or float32 scales reduced to their maximum by row or whole.
AlignedBuffer reduced(const EngineTensor& tensor, std::span<const std::byte> data) {
  const PlanParam& param = *tensor.param;
  const uint64_t rows = param.shape.empty() ? 1 : param.shape[0];
  const uint64_t cols = rows == 0 ? 0 : shape_numel(param.shape) / rows;
  if (tensor.reduce == EngineReduce::kTranspose) {
    const uint64_t size = dtype_bits(param.dtype) / 8;
    if (param.shape.size() != 2 || (size != 1 && size != 2 && size != 4) ||
        data.size() != rows * cols * size) {
      throw Error(
          ErrorKind::kInvalidArgument, "only a 2-D weight of 1, 2 or 4-byte elements is transposed",
          {.tensor = param.name, .expected = "a 2-D tensor", .found = shape_text(param.shape)});
    }
    AlignedBuffer out(data.size());
    transpose(data.data(), out.data(), rows, cols, size);
    return out;
  }
  if (param.dtype != DType::kF32 || data.size() != shape_numel(param.shape) * sizeof(float)) {
    throw Error(
        ErrorKind::kInvalidArgument, "only float32 scales are reduced to their maximum",
        {.tensor = param.name, .expected = "F32", .found = std::string(dtype_name(param.dtype))});
  }
  std::vector<float> values(shape_numel(param.shape));
  std::memcpy(values.data(), data.data(), data.size());
  const uint64_t group = tensor.reduce == EngineReduce::kRowMax ? cols : values.size();
  std::vector<float> maxima;
  for (uint64_t at = 0; group > 0 && at < values.size(); at += group) {
    maxima.push_back(*std::max_element(values.begin() + static_cast<ptrdiff_t>(at),
                                       values.begin() + static_cast<ptrdiff_t>(at + group)));
  }
  AlignedBuffer out(maxima.size() * sizeof(float), kMadeAlignment);
  std::memcpy(out.data(), maxima.data(), out.size());
  return out;
}

}  // namespace

nlohmann::json write_rank_files(const Plan& plan, const RankWeights& weights, const fs::path& dir,
                                uint64_t max_file_size, Engine engine, EngineUse use) {
  const RankPlan& rank = plan.ranks.at(static_cast<size_t>(weights.rank));
  std::map<std::string, std::string> metadata = {
      {"format", "shardload/1"},
      {"rank", std::to_string(rank.rank)},
      {"tp_size", std::to_string(plan.parallel.tp)},
      {"ep_size", std::to_string(plan.parallel.ep)},
      {"moe_tp_size", std::to_string(plan.moe_tp)},
      {"moe_tp_rank", std::to_string(rank.moe_tp_rank)},
      {"ep_rank", std::to_string(rank.ep_rank)},
      {"architecture", plan.model.architecture},
      {"dtype", std::string(dtype_name(plan.dtype))},
  };
  if (plan.parallel.has_dp_fields()) {  // layout.md "Data-parallel attention"
    metadata["dp_size"] = std::to_string(plan.parallel.dp);
    metadata["attn_tp_size"] = std::to_string(plan.parallel.attention_tp());
    metadata["attn_tp_rank"] = std::to_string(rank.attention_rank);
  }
  metadata.merge(recorded_layout(manifest_layout(plan, engine, use)));
  nlohmann::json files = nlohmann::json::array();
  std::vector<TensorToWrite> part;
  uint64_t part_bytes = 0;
  auto flush = [&] {
    const std::string name = fmt::format("model-rank-{}-part-{}.safetensors", rank.rank, files.size());
    // What the file held when written: a tensor a plan may or may not have (one the checkpoint
    // lacked) and that is gone from every rank file shows on load only by this count.
    metadata["tensor_count"] = std::to_string(part.size());
    write_safetensors((dir / name).string(), part, metadata);
    files.push_back(name);
    part.clear();
    part_bytes = 0;
  };
  // Bytes an engine's file holds that the rank buffer does not (a tensor in another dtype or
  // post-processed, a buffer), alive until the rank's last part is written.
  std::deque<AlignedBuffer> made;
  for (const EngineTensor& tensor : engine_tensors(plan, rank, engine, use)) {
    std::span<const std::byte> data =
        tensor.param ? weights.buffer.span().subspan(tensor.param->offset, tensor.param->nbytes)
                     : std::span<const std::byte>();
    const uint64_t elements = shape_numel(tensor.shape);
    uint64_t from_param = tensor.param ? shape_numel(tensor.param->shape) : 0;
    if (tensor.rows_after) {  // the engine's one tensor of two parameters' rows
      const PlanParam& second = *tensor.rows_after;
      AlignedBuffer& joined = made.emplace_back(data.size() + second.nbytes, kMadeAlignment);
      std::memcpy(joined.data(), data.data(), data.size());
      std::memcpy(joined.data() + data.size(), weights.buffer.span().data() + second.offset, second.nbytes);
      data = joined.span();
      from_param += shape_numel(second.shape);
    }
    if (tensor.reduce != EngineReduce::kNone) {
      data = made.emplace_back(reduced(tensor, data)).span();
      from_param = data.size() * 8 / dtype_bits(tensor.param->dtype);
    }
    if (from_param != elements || tensor.dtype != tensor.param->dtype) {
      const uint64_t bits = dtype_bits(tensor.dtype);
      AlignedBuffer& bytes = made.emplace_back(elements * bits / 8, kMadeAlignment);
      if (from_param == 0) {
        const std::vector<float> fill(elements, tensor.fill);
        convert(DType::kF32, fill.data(), tensor.dtype, bytes.data(), elements);
      } else {
        convert(tensor.param->dtype, data.data(), tensor.dtype, bytes.data(), from_param);
      }
      // A parameter of fewer elements has one (engine_tensors.h), repeated.
      const uint64_t element_bytes = bits / 8;
      for (uint64_t i = from_param; from_param > 0 && i < elements; ++i) {
        std::memcpy(bytes.data() + i * element_bytes, bytes.data(), element_bytes);
      }
      data = bytes.span();
    }
    // A part is closed when the next tensor would take it past the limit, unless it is still empty.
    if (!part.empty() && part_bytes + data.size() > max_file_size) flush();
    part.push_back({tensor.name, tensor.dtype, tensor.shape, data});
    part_bytes += data.size();
  }
  if (!part.empty() || files.empty()) flush();
  fault::at("export_rank_written");  // an export killed with its staging directory half full
  return {{"rank", rank.rank}, {"files", files}};
}

void finish_export(const Checkpoint& ckpt, const Plan& plan, Engine engine, EngineUse use,
                   const nlohmann::json& manifest_ranks, StagingDir& staging, bool overwrite) {
  const fs::path& out = staging.path();
  nlohmann::json manifest = manifest_layout(plan, engine, use);
  manifest["ranks"] = manifest_ranks;
  if (ckpt.is_directory()) {
    for (const auto& entry : fs::directory_iterator(ckpt.path())) {
      if (!is_copied(entry) || entry.path().filename() == kManifest) continue;
      if (entry.path().filename() == "config.json") {
        const std::optional<nlohmann::json> config = engine_config(
            plan, engine, read_json_file(entry.path().string(), ErrorKind::kConfig, kConfigJsonLimits, "config.json"));
        if (config) {
          std::ofstream file(out / "config.json", std::ios::binary | std::ios::trunc);
          file << config->dump(2) << "\n";
          file.close();
          if (!file) throw Error(ErrorKind::kIo, "cannot write config.json", {.file = (out / "config.json").string()});
          sync_path(out / "config.json");
          continue;
        }
      }
      std::error_code ec;
      fs::copy_file(entry.path(), out / entry.path().filename(),
                    fs::copy_options::overwrite_existing, ec);
      if (ec) {
        throw Error(ErrorKind::kIo, fmt::format("cannot copy: {}", ec.message()),
                    {.file = entry.path().string()});
      }
      sync_path(out / entry.path().filename());
    }
  }
  // The manifest last: it is what makes a directory an export. Everything it names is durable
  // first (the rank files were synced as they were written, their names here), so that after a
  // power cut a manifest never names files that are not whole.
  staging.sync();
  {
    std::ofstream file(out / kManifest, std::ios::binary | std::ios::trunc);
    file << manifest.dump(2) << "\n";
    file.close();
    if (!file)
      throw Error(ErrorKind::kIo, "cannot write the manifest",
                  {.file = (out / kManifest).string()});
  }
  sync_path(out / kManifest);
  staging.commit(overwrite, kept_on_overwrite);
}

std::unique_ptr<StagingDir> make_export_staging(const ExportOptions& options) {
  return std::make_unique<StagingDir>(resolved_path(options.out), std::string(kManifest),
                                      options.note);
}

void export_ranks(const Checkpoint& ckpt, const Plan& plan, const std::vector<RankWeights>& ranks,
                  const ExportOptions& options) {
  check_export_target(ckpt.path(), options);
  check_all_ranks(plan, ranks);
  check_engine_plan(plan, options.engine, export_use(options));
  // Everything is written into a directory beside --out and moved into place when complete: a
  // failed or interrupted export never leaves a directory a load would take for an export (or for
  // the checkpoint).
  const std::unique_ptr<StagingDir> staging = make_export_staging(options);
  nlohmann::json manifest_ranks = nlohmann::json::array();
  for (const RankWeights& weights : ranks) {
    manifest_ranks.push_back(write_rank_files(plan, weights, staging->path(), options.max_file_size,
                                              options.engine, export_use(options)));
  }
  finish_export(ckpt, plan, options.engine, export_use(options), manifest_ranks, *staging,
                options.overwrite);
}

}  // namespace shardload
