#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/transport.h"

namespace shardload {

// Whose sharded_state loader an export is written for (docs/engines.md). kLayout: docs/layout.md's
// names and dtypes as they are. kVllm / kSglang: the names, buffers and dtypes that engine's model
// holds on each rank, so that its load_format="sharded_state" takes the files as they are.
// kFastdeploy: FastDeploy's conventions, which docs/layout.md already follows (float32 q/k norms;
// --row-bias divided is its tp_row_bias), recorded as its target.
enum class Engine { kLayout, kVllm, kSglang, kFastdeploy };

inline constexpr std::pair<Engine, const char*> kEngineNames[] = {
    {Engine::kVllm, "vllm"}, {Engine::kSglang, "sglang"}, {Engine::kFastdeploy, "fastdeploy"}};
// "vllm", "sglang", "fastdeploy"; "layout" for kLayout (never written: such an export records no
// engine).
std::string_view engine_name(Engine engine);
std::optional<Engine> engine_from_name(std::string_view name);

// What an engine's layout is for: files its sharded_state loader reads (export --engine), or the
// engine hooks (shardload.vllm, shardload.sglang), which fill the model before the engine's own
// post-processing. kExportPostProcessed (export --engine sglang --engine-post-processed): files for
// a sharded_state loader that runs the engine's post-processing on the empty model before it reads
// them (SGLang's), holding the FP8 layers as that post-processing leaves them on an NVIDIA GPU with
// FP8 (compute capability 8.9 and 9.0; docs/engines.md).
enum class EngineUse { kExport, kHooks, kExportPostProcessed };

// Throws Error(kInvalidArgument) when `plan` cannot be exported for `engine` (or, with kHooks,
// filled into its model): a family whose names that engine's model has not been checked for
// (tests/engines/), or a layout choice the engine has no load for (an FP8 format not checked,
// SGLang's FP8 exports but kExportPostProcessed ones: its sharded_state loader post-processes
// before it reads, divided row biases, data-parallel fields, redundant experts, an expert map other
// than slot p = expert p); kExportPostProcessed for an engine other than SGLang or an unquantized
// checkpoint. kLayout and kFastdeploy take every plan but kExportPostProcessed. export_ranks checks
// it; a caller that loads first calls it before the load.
void check_engine_plan(const Plan& plan, Engine engine, EngineUse use = EngineUse::kExport);

struct ExportOptions {
  std::string out;
  Engine engine = Engine::kLayout;
  bool engine_post_processed = false;          // EngineUse::kExportPostProcessed
  uint64_t max_file_size = uint64_t{5} << 30;  // a part is closed when the next tensor would pass it
  bool overwrite = false;
  // Told of what earlier exports to `out` left behind: each staging directory removed because its
  // process is gone (bytes freed), and each kept with why (an export still running holds it).
  std::function<void(const std::string&)> note{};
};

// kExport, or kExportPostProcessed where the options ask for it.
inline EngineUse export_use(const ExportOptions& options) {
  return options.engine_post_processed ? EngineUse::kExportPostProcessed : EngineUse::kExport;
}

// Throws Error(kInvalidArgument) when an export of `model` cannot go to options.out: --out is the
// model's directory or inside it, the model is inside --out (both compared with symlinks resolved),
// --out is not a directory, or it is not empty without overwrite. export_ranks checks the same; a
// caller that loads first calls it before the load.
void check_export_target(const std::string& model, const ExportOptions& options);

// Writes OUT/model-rank-{r}-part-{k}.safetensors and OUT/shardload.json as docs/layout.md
// specifies, and copies the model directory's other top-level files beside them. All of it is
// written into a new directory beside OUT, moved to OUT once complete (with overwrite, an earlier
// OUT is replaced then, keeping its entries other than rank files and the manifest); on failure OUT
// is left as it was. An OUT that is a mount point cannot be renamed over: the export is then staged
// inside it and moved up with the manifest last. `ranks` holds every rank of the plan, in order.
// Every file and directory is synced before the manifest is written and again after the move, so
// that a power cut never leaves a manifest naming files that are not whole. The staging directory
// is locked while the export runs; one that an export killed part-way left beside OUT is removed
// by the next export to OUT (options.note is told).
void export_ranks(const Checkpoint& checkpoint, const Plan& plan,
                  const std::vector<RankWeights>& ranks, const ExportOptions& options);

// export_ranks for a distributed export: this node's `ranks` (its block, load_node's result) are
// written into the export every node writes together, with one manifest; the result is the export a
// single process writes. --out must be on storage every node sees. Collective (every node calls
// it); an error on any node is the same error on every node and leaves --out as it was.
void export_node_ranks(const Checkpoint& checkpoint, const Plan& plan, const std::vector<RankWeights>& ranks,
                       const ExportOptions& options, Transport& transport);

// is_export_dir (whether a directory is an export) is in checkpoint.h.

// DIR/shardload.json as JSON (not checked beyond being JSON). Throws Error.
nlohmann::json read_export_manifest(const std::string& dir);

// The layout a caller asks of an export it loads. Each field set must equal the export's, else
// load_export throws Error(kInvalidArgument) naming both values; a field not set takes the
// export's.
struct ExportLayout {
  std::optional<int> tp{};
  std::optional<int> ep{};
  bool ep_equals_tp = false;  // expert parallelism over all TP ranks, whatever tp is
  std::optional<int> redundant_experts{};
  std::optional<std::vector<std::vector<int>>> expert_map{};  // physical_to_logical_map
  std::optional<RowBias> row_bias{};
  std::optional<bool> split_shared_experts{};
  std::optional<DType> dtype{};
  std::optional<bool> quantize_fp8{};  // --quantization fp8 (true) or none (false)
  // Data-parallel attention (--dp, --dp-style, --enable-dp-lm-head, --moe-dense-tp-size 1): the
  // scopes these give, with the export's values for those not given, must be the export's.
  std::optional<int> dp{};
  std::optional<DpStyle> dp_style{};
  std::optional<bool> dp_lm_head{};
  std::optional<bool> replicate_dense_mlp{};
};

// An export loaded back: the manifest and, per rank, its tensors read from the rank files.
struct LoadedExport {
  // shardload.json as parsed; behind a pointer so that this header needs only nlohmann's forward
  // declarations (never null in what load_export returns).
  std::shared_ptr<const nlohmann::json> manifest;
  struct Tensor {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t offset;  // in the rank buffer
    uint64_t nbytes;
  };
  struct Rank {
    int rank = 0;
    std::vector<Tensor> tensors;
    AlignedBuffer buffer;
  };
  std::vector<Rank> ranks;
};

// Loads the pre-sharded files of an export directly (nothing converted). `ranks` empty: all. Before
// reading any tensor it checks that shardload.json is whole (tp_size = ep_size x moe_tp_size, one
// entry per rank 0..T-1 in order) and that the metadata of each rank file it reads names that rank
// and the manifest's layout, architecture and dtype, and (files that record them) its quantization,
// row bias, shared experts, redundant experts, expert map (by hash), dp style and scopes
// (Error(kConfig) or Error(kInvalidMetadata) naming the file and both values), and that `expected`
// fits the export (Error(kInvalidArgument), as is a rank outside the export). Then it plans the
// export's config.json with shardload.json's layout (Error(kConfig) when it has none or they do not
// plan) and checks each rank file's tensors against that plan: a tensor the plan lacks
// (kUnknownTensor), one it has that no file holds (kTensorNotFound), another dtype
// (kUnsupportedDtype) or shape (kShapeMismatch), each naming the file, the tensor and both values;
// a file holding another number of tensors than it records is Error(kInvalidMetadata).
LoadedExport load_export(const std::string& dir, const std::vector<int>& ranks = {},
                         int threads = 0, const ExportLayout& expected = {});

}  // namespace shardload
