// shardload.export: a layout written as pre-sharded rank files (docs/layout.md).
#include <pybind11/stl.h>

#include "core/byte_size.h"
#include "export/engine_tensors.h"
#include "python/bindings.h"
#include "python/path_arg.h"
#include "python/json_value.h"
#include "python/layout_kwargs.h"
#include "python/tensor.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/loader.h"

namespace py = pybind11;

namespace shardload::python {
namespace {

// engine=None: docs/layout.md's names; "vllm", "sglang", "fastdeploy": as `export --engine`.
Engine engine_arg(const std::optional<std::string>& name) {
  if (!name) return Engine::kLayout;
  const std::optional<Engine> engine = engine_from_name(*name);
  if (!engine) {
    throw Error(ErrorKind::kInvalidArgument, "not an engine shardload exports for",
                {.field = "engine", .expected = "\"vllm\", \"sglang\", \"fastdeploy\" or None", .found = *name});
  }
  return *engine;
}

py::dict export_model(const py::object& model_path, const py::object& out_path,
                      const py::object& max_file_size, bool overwrite, int threads,
                      const std::optional<std::string>& engine, bool engine_post_processed,
                      const py::kwargs& layout) {
  const std::string model = path_arg(model_path);
  const std::string out = path_arg(out_path);
  const ParallelConfig parallel = layout_from_kwargs(layout);
  ExportOptions options{.out = out,
                        .engine = engine_arg(engine),
                        .engine_post_processed = engine_post_processed,
                        .overwrite = overwrite};
  if (!max_file_size.is_none()) {
    options.max_file_size = py::isinstance<py::str>(max_file_size)
                                ? parse_byte_size(py::cast<std::string>(max_file_size))
                                : py::cast<uint64_t>(max_file_size);
  }
  uint64_t bytes = 0;
  int ranks = 0;
  {
    py::gil_scoped_release release;
    const Checkpoint ckpt = Checkpoint::open(model);
    check_export_target(ckpt.path(), options);  // before the load, as the command line does
    const Plan plan = make_plan(ckpt, parallel);
    check_engine_plan(plan, options.engine, export_use(options));  // before the load too
    LoadOptions load_options;
    load_options.threads = threads;
    const std::vector<RankWeights> weights = load_ranks(ckpt, plan, load_options);
    export_ranks(ckpt, plan, weights, options);
    for (const RankPlan& rank : plan.ranks) bytes += rank.bytes;
    ranks = static_cast<int>(plan.ranks.size());
  }
  py::dict summary;
  summary["out"] = out;
  summary["ranks"] = ranks;
  summary["bytes"] = bytes;
  return summary;
}

// An export read back (shardload.json and every rank file checked), as {rank: {name: Tensor}}.
py::dict load_export_dir(const py::object& dir_path, const std::optional<std::vector<int>>& ranks, int threads) {
  const std::string dir = path_arg(dir_path);
  auto loaded = std::make_shared<LoadedExport>();
  {
    py::gil_scoped_release release;
    *loaded = load_export(dir, ranks.value_or(std::vector<int>{}), threads);
  }
  py::dict out;
  for (LoadedExport::Rank& rank : loaded->ranks) {
    py::dict tensors;
    for (const LoadedExport::Tensor& t : rank.tensors) {
      tensors[py::str(t.name)] = Tensor{loaded, rank.buffer.data() + t.offset, t.dtype, t.shape, t.name};
    }
    out[py::int_(rank.rank)] = tensors;
  }
  return out;
}

// What rank `rank` of a layout holds under `engine`'s names (docs/engines.md), as the engine hooks
// (shardload.vllm) fill an engine's model from layout.md's tensors: per tensor its engine name, dtype
// and shape, and the layout tensor it is made of (None: a buffer no checkpoint has, every element
// `fill`). A plan the engine cannot take is refused here, before anything is read.
py::object engine_layout(const py::object& model_path, int rank, const std::string& engine_name_arg,
                         const py::kwargs& layout) {
  const Engine engine = engine_arg(engine_name_arg);
  const std::string model = path_arg(model_path);
  const ParallelConfig parallel = layout_from_kwargs(layout);
  nlohmann::json tensors;
  {
    py::gil_scoped_release release;
    const Plan plan = make_plan(Checkpoint::open(model), parallel);
    check_engine_plan(plan, engine, EngineUse::kHooks);
    if (rank < 0 || rank >= static_cast<int>(plan.ranks.size())) {
      throw Error(ErrorKind::kInvalidArgument, "no such rank in the layout",
                  {.field = "rank",
                   .expected = "0 to " + std::to_string(plan.ranks.size() - 1),
                   .found = std::to_string(rank)});
    }
    tensors = engine_tensors_json(plan, plan.ranks[static_cast<size_t>(rank)], engine);
  }
  return to_python(tensors);
}

}  // namespace

void bind_export(py::module_& m) {
  m.def(
      "export", &export_model, py::arg("model"), py::arg("out"), py::kw_only(),
      py::arg("max_file_size") = py::none(), py::arg("overwrite") = false, py::arg("threads") = 0,
      py::arg("engine") = py::none(), py::arg("engine_post_processed") = false,
      "Writes the layout's rank files and shardload.json into `out` (atomically); "
      "engine=\"vllm\" or \"sglang\" writes them for that engine's sharded_state loader "
      "(docs/engines.md); engine_post_processed=True (SGLang, FP8): its FP8 layers as SGLang's "
      "post-processing leaves them on NVIDIA GPUs with FP8");
  m.def("load_export", &load_export_dir, py::arg("dir"), py::kw_only(), py::arg("ranks") = py::none(),
        py::arg("threads") = 0, "An export's rank tensors, {rank: {name: Tensor}}, sharing one buffer per rank");
  m.def("engine_layout", &engine_layout, py::arg("model"), py::kw_only(), py::arg("rank"),
        py::arg("engine"),
        "What a rank holds under an engine's names: [{name, dtype, shape, source, source_shape, "
        "source_dtype, fill}], source the layout tensor it is made of (None: a buffer, every "
        "element fill; one element where shape holds more: repeated); refuses a plan the engine "
        "cannot take");
}

}  // namespace shardload::python
