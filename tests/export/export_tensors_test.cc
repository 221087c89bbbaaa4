// An export loads only when each rank file holds what the export's own layout plans (its
// config.json planned with shardload.json) and records the layout shardload.json gives: a rank file
// of another export, a tensor dropped, added, reshaped or recast, and an edit of shardload.json that
// no tensor shows are each refused by `shardload load` (exit 1) and load_export, naming what
// differs, before any byte is copied.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../shard/handmade.h"
#include "error_kind.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::kind_of;
using ::shardload::testing::read_file;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// A tiny checkpoint at DIR/NAME.
std::string tiny(const TempDir& dir, const std::string& name, TinyOptions options) {
  options.out = dir.file(name);
  make_tiny(options);
  return options.out;
}

// Exports `model` under `parallel` to `out` in this process.
void export_files(const std::string& model, const ParallelConfig& parallel, const std::string& out,
                  uint64_t max_file_size = uint64_t{5} << 30) {
  const Checkpoint ckpt = Checkpoint::open(model);
  const Plan plan = make_plan(ckpt, parallel);
  export_ranks(ckpt, plan, load_ranks(ckpt, plan), {.out = out, .max_file_size = max_file_size});
}

ParallelConfig layout(int tp, int ep) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  return parallel;
}

// A rank file read whole: its tensors with their bytes, and its metadata.
struct OwnedTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<std::byte> bytes;
};
struct RankFile {
  std::vector<OwnedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

RankFile read_rank_file(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  RankFile out{{}, file.header().metadata};
  for (const TensorInfo& info : file.header().tensors) {
    OwnedTensor& t = out.tensors.emplace_back(OwnedTensor{info.name, info.dtype, info.shape, {}});
    t.bytes.resize(info.nbytes());
    file.read(info, t.bytes);
  }
  return out;
}

// Rewrites a rank file after `edit` changed its tensors or metadata (as a hand edit would: a valid
// safetensors file).
void rewrite(const std::string& path, const std::function<void(RankFile&)>& edit) {
  RankFile file = read_rank_file(path);
  edit(file);
  std::vector<TensorToWrite> tensors;
  for (const OwnedTensor& t : file.tensors) tensors.push_back({t.name, t.dtype, t.shape, t.bytes});
  write_safetensors(path, tensors, file.metadata);
}

OwnedTensor& tensor(RankFile& file, const std::string& name) {
  for (OwnedTensor& t : file.tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

// What each rank file records beyond the layout.md metadata: an export written before these were
// recorded has none of them.
void forget_recorded_layout(RankFile& file) {
  for (const char* key : {"quantization", "row_bias", "no_split_shared_experts", "redundant_experts",
                          "physical_to_logical_map_xxh3", "dp_style", "scopes", "tensor_count"}) {
    file.metadata.erase(key);
  }
}

std::string rank_file(const std::string& out, int rank, int part = 0) {
  return out + "/model-rank-" + std::to_string(rank) + "-part-" + std::to_string(part) +
         ".safetensors";
}

// `shardload load OUT` and load_export(OUT) both refuse the export, the command with exit 1, each
// naming every one of `words`; returns load_export's error kind.
ErrorKind expect_refused(const std::string& out, const std::vector<std::string>& words) {
  const testing::CommandResult cli = run_shardload({"load", out});
  EXPECT_EQ(cli.exit_code, 1) << cli.out << cli.err;
  std::string message;
  const ErrorKind kind = kind_of([&] { load_export(out); }, &message);
  for (const std::string& word : words) {
    EXPECT_NE(cli.err.find(word), std::string::npos) << "'" << word << "' not in: " << cli.err;
    EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' not in: " << message;
  }
  return kind;
}

void expect_loads(const std::string& out) {
  const testing::CommandResult cli = run_shardload({"load", out});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NO_THROW(load_export(out));
}

// A Qwen3-MoE export (8 experts) at tp 4 x ep 2: four experts per EP rank.
class ExportTensors : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tiny(dir_, "model", {.arch = "qwen3_moe", .seed = 3});
    export_files(model_, layout(4, 2), out_);
    manifest_ = nlohmann::json::parse(read_file(out_ + "/shardload.json"));
  }
  void write_manifest(const nlohmann::json& manifest) {
    write_file(out_ + "/shardload.json", manifest.dump(2));
  }

  static constexpr const char* kExperts = "model.layers.1.mlp.experts.w13_weight";
  static constexpr const char* kNorm = "model.layers.1.input_layernorm.weight";
  static constexpr const char* kQkv = "model.layers.1.self_attn.qkv_proj.weight";

  TempDir dir_;
  std::string model_;
  std::string out_ = dir_.file("out");
  nlohmann::json manifest_;
};

TEST_F(ExportTensors, AnUntouchedExportLoads) {
  expect_loads(out_);
  const LoadedExport loaded = load_export(out_, {2});
  ASSERT_EQ(loaded.ranks.size(), 1u);
  EXPECT_EQ(loaded.ranks[0].tensors.size(),
            read_rank_file(rank_file(out_, 2)).tensors.size());
}

// The file of rank 1 from an export of a 16-expert model at the same layout: its rank, layout,
// architecture and dtype all match; it records another expert map, and (an export written before
// maps were recorded) its expert tensors hold 8 experts where the plan gives 4.
TEST_F(ExportTensors, ARankFileOfAnExportWith16ExpertsIsRefused) {
  const std::string other_model =
      tiny(dir_, "model16", {.arch = "qwen3_moe", .seed = 3, .experts = 16});
  const std::string other = dir_.file("out16");
  export_files(other_model, layout(4, 2), other);
  fs::copy_file(rank_file(other, 1), rank_file(out_, 1), fs::copy_options::overwrite_existing);
  EXPECT_EQ(expect_refused(out_, {"model-rank-1-part-0.safetensors", "physical_to_logical_map"}),
            ErrorKind::kInvalidMetadata);
  EXPECT_NO_THROW(load_export(out_, {0}));  // the other ranks are untouched

  for (int r = 0; r < 4; ++r) rewrite(rank_file(out_, r), forget_recorded_layout);
  EXPECT_EQ(expect_refused(out_, {"model-rank-1-part-0.safetensors", kExperts, "expected [4, ",
                                  "found [8, "}),
            ErrorKind::kShapeMismatch);
}

// Another model of the same architecture (larger hidden sizes) exported at the same layout: every
// metadata field agrees; only the plan of this export's config.json tells the files apart.
TEST_F(ExportTensors, ARankFileOfAnotherModelOfTheSameLayoutIsRefused) {
  const std::string other_model =
      tiny(dir_, "larger", {.arch = "qwen3_moe", .seed = 3, .size_bytes = 8 << 20});
  const std::string other = dir_.file("larger_out");
  export_files(other_model, layout(4, 2), other);
  EXPECT_EQ(read_rank_file(rank_file(other, 3)).metadata,
            read_rank_file(rank_file(out_, 3)).metadata);
  fs::copy_file(rank_file(other, 3), rank_file(out_, 3), fs::copy_options::overwrite_existing);
  EXPECT_EQ(expect_refused(out_, {"model-rank-3-part-0.safetensors", "shape disagrees"}),
            ErrorKind::kShapeMismatch);
}

TEST_F(ExportTensors, ADroppedTensorIsRefused) {
  rewrite(rank_file(out_, 2), [](RankFile& file) {
    std::erase_if(file.tensors, [](const OwnedTensor& t) { return t.name == kNorm; });
  });
  EXPECT_EQ(expect_refused(out_, {"model-rank-2-part-0.safetensors", kNorm, "missing"}),
            ErrorKind::kTensorNotFound);
}

TEST_F(ExportTensors, AnExtraTensorIsRefused) {
  rewrite(rank_file(out_, 0), [](RankFile& file) {
    OwnedTensor extra = tensor(file, kNorm);
    extra.name = "model.layers.1.extra_norm.weight";
    file.tensors.push_back(extra);
  });
  EXPECT_EQ(expect_refused(out_, {"model-rank-0-part-0.safetensors",
                                  "model.layers.1.extra_norm.weight", "not a tensor of rank 0"}),
            ErrorKind::kUnknownTensor);
}

// The same bytes as twice the rows, half as wide: a valid file whose tensor has the wrong shape.
TEST_F(ExportTensors, AChangedShapeIsRefused) {
  Shape planned;
  rewrite(rank_file(out_, 1), [&](RankFile& file) {
    OwnedTensor& qkv = tensor(file, kQkv);
    planned = qkv.shape;
    qkv.shape = {planned.at(0) * 2, planned.at(1) / 2};
  });
  EXPECT_EQ(expect_refused(out_, {"model-rank-1-part-0.safetensors", kQkv,
                                  fmt::format("expected [{}, {}]", planned[0], planned[1]),
                                  fmt::format("found [{}, {}]", planned[0] * 2, planned[1] / 2)}),
            ErrorKind::kShapeMismatch);
}

// The same bytes read as float16: a valid file whose tensor has the wrong dtype.
TEST_F(ExportTensors, AChangedDtypeIsRefused) {
  rewrite(rank_file(out_, 3), [](RankFile& file) { tensor(file, kNorm).dtype = DType::kF16; });
  EXPECT_EQ(expect_refused(out_, {"model-rank-3-part-0.safetensors", kNorm, "expected BF16",
                                  "found F16"}),
            ErrorKind::kUnsupportedDtype);
}

// Edits of shardload.json that no rank file's shapes would show: the rank files record each.
TEST_F(ExportTensors, ManifestEditsTheRankFilesRecordAreRefused) {
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> edits = {
      {"quantization", [](nlohmann::json& m) { m["quantization"] = "fp8-dynamic"; }},
      {"redundant_experts", [](nlohmann::json& m) { m["redundant_experts"] = 2; }},
      // Two experts of the first MoE layer swapped: every shape stays as it was.
      {"physical_to_logical_map",
       [](nlohmann::json& m) {
         std::swap(m["physical_to_logical_map"][0][0], m["physical_to_logical_map"][0][5]);
       }},
      {"row_bias", [](nlohmann::json& m) { m["row_bias"] = "divided"; }},
      {"no_split_shared_experts", [](nlohmann::json& m) { m["no_split_shared_experts"] = true; }},
  };
  for (const auto& [field, edit] : edits) {
    SCOPED_TRACE(field);
    nlohmann::json manifest = manifest_;
    edit(manifest);
    write_manifest(manifest);
    EXPECT_EQ(expect_refused(out_, {"model-rank-0-part-0.safetensors", field,
                                    "does not match rank 0 of shardload.json"}),
              ErrorKind::kInvalidMetadata);
  }
  write_manifest(manifest_);
  expect_loads(out_);
}

// An export written before the rank files recorded the layout still loads, and its tensors are
// still checked against its plan: a shardload.json quantization edit shows in the dtypes, a map
// taken away in the plan's. (A map permuted in place it cannot see: no tensor changes.)
TEST_F(ExportTensors, AnExportWrittenBeforeTheLayoutWasRecordedLoadsAndIsChecked) {
  for (int r = 0; r < 4; ++r) rewrite(rank_file(out_, r), forget_recorded_layout);
  expect_loads(out_);
  nlohmann::json manifest = manifest_;
  manifest["quantization"] = "fp8-dynamic";
  write_manifest(manifest);
  EXPECT_EQ(expect_refused(out_, {"model-rank-0-part-0.safetensors", "expected F8_E4M3",
                                  "found BF16"}),
            ErrorKind::kUnsupportedDtype);
  // A model with experts has their map in shardload.json.
  manifest = manifest_;
  manifest["physical_to_logical_map"] = nlohmann::json::array();
  write_manifest(manifest);
  EXPECT_EQ(expect_refused(out_, {"shardload.json", "physical_to_logical_map"}), ErrorKind::kConfig);
  manifest["redundant_experts"] = 1 << 20;
  write_manifest(manifest);
  EXPECT_EQ(expect_refused(out_, {"shardload.json", "redundant_experts"}), ErrorKind::kConfig);
}

// config.json is what the rank files are checked against: edited, the files no longer fit its
// plan; gone, the export is refused (exit 1, not a usage error).
TEST_F(ExportTensors, TheExportsConfigJsonIsWhatTheFilesAreCheckedAgainst) {
  nlohmann::json config = nlohmann::json::parse(read_file(out_ + "/config.json"));
  config["moe_intermediate_size"] = config["moe_intermediate_size"].get<int>() * 2;
  write_file(out_ + "/config.json", config.dump(2));
  EXPECT_EQ(expect_refused(out_, {"model-rank-0-part-0.safetensors", "shape disagrees"}),
            ErrorKind::kShapeMismatch);
  fs::remove(out_ + "/config.json");
  EXPECT_EQ(expect_refused(out_, {"config.json"}), ErrorKind::kConfig);
}

// ERNIE-4.5's moe_statics bias is taken only when the checkpoint has it: one rank missing it is a
// missing tensor; gone from every rank alike, each file's recorded tensor count shows it.
TEST(ExportOptionalTensors, AnOptionalTensorDroppedFromSomeOrEveryRankIsRefused) {
  TempDir dir;
  const std::string model = tiny(dir, "model", {.arch = "ernie4_5_moe", .seed = 3});
  const std::string out = dir.file("out");
  export_files(model, layout(2, 1), out);
  expect_loads(out);
  std::string bias;
  for (const OwnedTensor& t : read_rank_file(rank_file(out, 0)).tensors) {
    if (t.name.ends_with("mlp.gate.e_score_correction_bias")) bias = t.name;
  }
  ASSERT_FALSE(bias.empty()) << "the tiny ERNIE checkpoint has no moe_statics";
  const auto drop = [&](RankFile& file) {
    std::erase_if(file.tensors, [&](const OwnedTensor& t) { return t.name == bias; });
  };
  rewrite(rank_file(out, 1), drop);
  EXPECT_EQ(expect_refused(out, {"model-rank-1-part-0.safetensors", bias, "missing"}),
            ErrorKind::kTensorNotFound);
  rewrite(rank_file(out, 0), drop);
  EXPECT_EQ(expect_refused(out, {"model-rank-0-part-0.safetensors", "tensor_count"}),
            ErrorKind::kInvalidMetadata);
}

// What the check takes for an export's plan is what the export was written with, for every family,
// weight format and layout kind: every untouched export loads.
struct Written {
  std::string arch;
  std::string quant = "none";
  std::string activation_scheme = {};
  int tp = 2;
  int ep = 1;
  std::function<void(ParallelConfig&)> more = {};
  uint64_t max_file_size = uint64_t{5} << 30;
};

TEST(ExportPlans, EveryUntouchedExportLoads) {
  std::vector<Written> cases;
  for (const std::string& arch : tiny_architectures()) {
    cases.push_back({.arch = arch, .tp = 1});
    cases.push_back({.arch = arch, .tp = 4});
    if (tiny_writes_fp8(arch)) {
      cases.push_back({.arch = arch, .quant = "fp8", .tp = 2});
      cases.push_back({.arch = arch, .quant = "fp8", .activation_scheme = "dynamic", .tp = 2});
      cases.push_back({.arch = arch, .quant = "fp8-block", .tp = 2});
    }
    cases.push_back({.arch = arch, .tp = 2, .more = [](ParallelConfig& p) { p.quantize_fp8 = true; }});
    cases.push_back(
        {.arch = arch, .tp = 4, .more = [](ParallelConfig& p) { p.dtype = DType::kF32; }});
    cases.push_back({.arch = arch, .tp = 4, .more = [](ParallelConfig& p) {
                       p.row_bias = RowBias::kDivided;
                       p.dp = 2;
                     }});
  }
  for (const std::string arch :
       {"qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v3", "ernie4_5_moe", "glm4_moe"}) {
    cases.push_back({.arch = arch, .tp = 4, .ep = 2});
    cases.push_back({.arch = arch, .tp = 4, .ep = 4, .more = [](ParallelConfig& p) {
                       p.redundant_experts = 4;
                     }});
    cases.push_back({.arch = arch, .tp = 4, .ep = 2, .more = [](ParallelConfig& p) {
                       p.split_shared_experts = false;
                       p.dp = 2;
                       p.dp_style = DpStyle::kVllm;
                     }});
    cases.push_back({.arch = arch, .tp = 4, .ep = 2, .more = [](ParallelConfig& p) {
                       p.dp = 4;
                       p.dp_lm_head = true;
                       p.replicate_dense_mlp = true;
                     }});
  }
  cases.push_back({.arch = "qwen3_moe", .tp = 2, .ep = 2, .max_file_size = 64 << 10});
  TempDir dir;
  std::map<std::string, std::string> models;
  int n = 0;
  for (const Written& c : cases) {
    const std::string key = c.arch + "-" + c.quant + "-" + c.activation_scheme;
    const std::string label = key + " tp " + std::to_string(c.tp) + " ep " + std::to_string(c.ep);
    SCOPED_TRACE(label);
    if (!models.contains(key)) {
      models[key] = tiny(dir, "model" + std::to_string(models.size()),
                         {.arch = c.arch, .quant = c.quant, .activation_scheme = c.activation_scheme});
    }
    ParallelConfig parallel = layout(c.tp, c.ep);
    if (c.more) c.more(parallel);
    const Checkpoint ckpt = Checkpoint::open(models[key]);
    const Plan plan = make_plan(ckpt, parallel);
    const std::string out = dir.file("out" + std::to_string(n++));
    export_ranks(ckpt, plan, load_ranks(ckpt, plan), {.out = out, .max_file_size = c.max_file_size});
    try {
      const LoadedExport loaded = load_export(out);
      EXPECT_EQ(loaded.ranks.size(), plan.ranks.size());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    fs::remove_all(out);
  }
  EXPECT_EQ(n, static_cast<int>(cases.size()));
}

// What no tiny family has: biases (row-parallel ones divided by 3 and 6), defaulted kv heads and
// head_dim in a float16 checkpoint with a tied head, and checkpoints without the parameters a
// family takes only when present (GLM's q/k norms, ERNIE's moe_statics): each export loads.
TEST(ExportPlans, HandmadeCheckpointsAndOnesWithoutOptionalTensorsLoad) {
  TempDir dir;
  const std::string biased = dir.file("biased");
  const nlohmann::json biased_config = testing::biased_llama_config();
  testing::write_handmade(biased, biased_config, testing::handmade_tensors(biased_config), 5);
  const std::string plain = dir.file("plain");
  const nlohmann::json plain_config = testing::plain_llama_config();
  testing::write_handmade(plain, plain_config, testing::handmade_tensors(plain_config, DType::kF16),
                          5);
  const std::string glm = tiny(dir, "glm", {.arch = "glm4_moe", .seed = 3});
  testing::drop_tensors(glm, "self_attn.q_norm.");
  testing::drop_tensors(glm, "self_attn.k_norm.");
  const std::string ernie = tiny(dir, "ernie", {.arch = "ernie4_5_moe", .seed = 3});
  testing::drop_tensors(ernie, "moe_statics");
  const std::vector<std::pair<std::string, ParallelConfig>> cases = {
      {biased, layout(3, 1)},
      {biased, [] {
         ParallelConfig p = layout(6, 1);
         p.row_bias = RowBias::kDivided;
         return p;
       }()},
      {plain, layout(3, 1)},
      {plain, layout(6, 1)},
      {glm, layout(4, 2)},
      {ernie, layout(2, 2)},
  };
  int n = 0;
  for (const auto& [model, parallel] : cases) {
    SCOPED_TRACE(model + " tp " + std::to_string(parallel.tp));
    const std::string out = dir.file("out" + std::to_string(n++));
    export_files(model, parallel, out);
    expect_loads(out);
  }
  // The parameters the checkpoints lacked are not in their exports, and not asked of them.
  for (const std::string& out : {dir.file("out4"), dir.file("out5")}) {
    for (const OwnedTensor& t : read_rank_file(rank_file(out, 0)).tensors) {
      EXPECT_EQ(t.name.find("q_norm"), std::string::npos) << t.name;
      EXPECT_FALSE(t.name.ends_with("e_score_correction_bias") && out == dir.file("out5")) << t.name;
    }
  }
}

}  // namespace
}  // namespace shardload
