// Qwen3.5-MoE's routed experts fused on disk (qwen3_5_moe): make-tiny's checkpoint rewritten as
// transformers 5 holds the experts and a checkpoint saved from its state dict stores them,
// mlp.experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and
// mlp.experts.down_proj [E, H, I], plans from those stacked sources and exports byte for byte what the
// per-expert checkpoint exports, at ep 2, with MoE-TP, both, and with redundant experts.
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/plan.h"
#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
// Named: the unity build puts this file beside the other tests of its folder.
namespace qwen3_5_fused_test {
namespace {

namespace fs = std::filesystem;
using testing::shardload_cli;

std::vector<std::byte> tensor_bytes(const Checkpoint& ckpt, const std::string& name) {
  const Checkpoint::Entry& entry = ckpt.at(name);
  std::vector<std::byte> bytes(entry.info->nbytes());
  ckpt.files()[entry.file].read(*entry.info, bytes);
  return bytes;
}

// `src` (make-tiny's qwen3_5_moe) written again to `out` as one file, each layer's per-expert
// gate/up/down tensors replaced by the two fused ones; config.json as it is.
void write_fused_copy(const std::string& src, const std::string& out, uint64_t experts) {
  const Checkpoint ckpt = Checkpoint::open(src);
  const std::regex per_expert(R"((.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight)");
  std::map<std::string, std::vector<std::byte>> data;  // every tensor's bytes, by its new name
  std::vector<TensorToWrite> tensors;
  std::map<std::string, Shape> fused_shapes;
  for (const std::string& name : ckpt.tensor_names()) {
    std::smatch m;
    if (!std::regex_match(name, m, per_expert)) {
      const TensorInfo& info = *ckpt.at(name).info;
      data[name] = tensor_bytes(ckpt, name);
      tensors.push_back({name, info.dtype, info.shape, {}});
      continue;
    }
    if (m[2] != "0" || m[3] != "gate") continue;  // each layer once, from its expert 0's gate
    const std::string layer = m[1];
    std::vector<std::byte>& gate_up = data[layer + "gate_up_proj"];
    std::vector<std::byte>& down = data[layer + "down_proj"];
    for (uint64_t x = 0; x < experts; ++x) {
      const std::string e = layer + std::to_string(x) + ".";
      for (const char* part : {"gate_proj", "up_proj"}) {
        const std::vector<std::byte> bytes = tensor_bytes(ckpt, e + part + ".weight");
        gate_up.insert(gate_up.end(), bytes.begin(), bytes.end());
      }
      const std::vector<std::byte> bytes = tensor_bytes(ckpt, e + "down_proj.weight");
      down.insert(down.end(), bytes.begin(), bytes.end());
    }
    const Shape gate = ckpt.at(layer + "0.gate_proj.weight").info->shape;  // [I, H]
    const Shape down_shape = ckpt.at(layer + "0.down_proj.weight").info->shape;  // [H, I]
    tensors.push_back({layer + "gate_up_proj", DType::kBF16, {experts, 2 * gate[0], gate[1]}, {}});
    tensors.push_back({layer + "down_proj", DType::kBF16, {experts, down_shape[0], down_shape[1]}, {}});
  }
  for (TensorToWrite& t : tensors) t.data = data.at(t.name);
  fs::create_directories(out);
  for (const auto& entry : fs::directory_iterator(src)) {  // config.json, the tokenizer's files
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".safetensors") && !name.ends_with(".index.json")) fs::copy_file(entry.path(), out + "/" + name);
  }
  write_safetensors(out + "/model.safetensors", tensors);
}

Plan plan_of(const std::string& dir, int tp, int ep) {
  ParallelConfig p;
  p.tp = tp;
  p.ep = ep;
  return make_plan(Checkpoint::open(dir), p);
}

// Every file of two exports, byte for byte.
void expect_same_exports(const std::string& a, const std::string& b) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(a)) names.push_back(entry.path().filename().string());
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    ASSERT_TRUE(fs::exists(b + "/" + name)) << name;
    if (!name.ends_with(".safetensors")) continue;
    EXPECT_TRUE(testing::read_file(a + "/" + name) == testing::read_file(b + "/" + name)) << name;
  }
}

TEST(Qwen35FusedExperts, StackedSourcesExportWhatThePerExpertCheckpointExports) {
  testing::TempDir tmp;
  const std::string per_expert = tmp.file("per-expert");
  const std::string fused = tmp.file("fused");
  make_tiny({.arch = "qwen3_5_moe", .out = per_expert, .seed = testing::test_seed()});
  const Plan reference = plan_of(per_expert, 2, 2);
  const uint64_t experts = reference.model.experts, inter = reference.model.moe_intermediate,
                 hidden = reference.model.hidden;
  write_fused_copy(per_expert, fused, experts);

  const Checkpoint ckpt = Checkpoint::open(fused);
  ASSERT_EQ(ckpt.at("model.layers.0.mlp.experts.gate_up_proj").info->shape, (Shape{experts, 2 * inter, hidden}));
  ASSERT_EQ(ckpt.find("model.layers.0.mlp.experts.0.gate_proj.weight"), nullptr);
  const Plan plan = plan_of(fused, 2, 2);
  EXPECT_TRUE(plan.model.stacked_experts);
  EXPECT_FALSE(reference.model.stacked_experts);
  bool stacked_source = false;
  for (const PlanSource& s : plan.sources) {
    if (s.name == "model.layers.0.mlp.experts.gate_up_proj") {
      stacked_source = true;
      EXPECT_EQ(s.expert_rows, 2 * inter);  // expert x's gate rows at x * 2I, its up rows I further
    }
  }
  EXPECT_TRUE(stacked_source);
  // The same rank tensors, names, shapes and dtypes (and below, bytes).
  ASSERT_EQ(plan.ranks.size(), reference.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    ASSERT_EQ(plan.ranks[r].params.size(), reference.ranks[r].params.size());
    for (size_t i = 0; i < plan.ranks[r].params.size(); ++i) {
      EXPECT_EQ(plan.ranks[r].params[i].name, reference.ranks[r].params[i].name);
      EXPECT_EQ(plan.ranks[r].params[i].shape, reference.ranks[r].params[i].shape);
    }
  }

  // Whole experts (ep 2), MoE-TP 2 (each expert's gate and up halves cut), both (tp 4 x ep 2), and two
  // redundant experts (slots that repeat an expert: its stacked rows read again).
  const std::vector<std::vector<std::string>> layouts = {{"--tp", "2", "--ep", "2"},
                                                         {"--tp", "2"},
                                                         {"--tp", "4", "--ep", "2"},
                                                         {"--tp", "4", "--ep", "2", "--redundant-experts", "2"}};
  for (size_t l = 0; l < layouts.size(); ++l) {
    const std::string a = tmp.file("export-per-expert-" + std::to_string(l));
    const std::string b = tmp.file("export-fused-" + std::to_string(l));
    for (const auto& [model, out] : {std::pair{per_expert, a}, std::pair{fused, b}}) {
      std::vector<std::string> args = {"export", model, "--out", out};
      args.insert(args.end(), layouts[l].begin(), layouts[l].end());
      const testing::CommandResult result = shardload_cli(args);
      ASSERT_EQ(result.exit_code, 0) << "layout " << l << ": " << result.err;
    }
    expect_same_exports(a, b);
  }
}

// A checkpoint that fuses its first MoE layer's experts and not a later one's: the first MoE layer says
// the experts are fused, and the later layer's per-expert tensors are named, none of the rules reading them.
TEST(Qwen35FusedExperts, ALayerLeftPerExpertIsNamed) {
  testing::TempDir tmp;
  const std::string per_expert = tmp.file("per-expert");
  const std::string fused = tmp.file("fused");
  make_tiny({.arch = "qwen3_5_moe", .out = per_expert, .seed = testing::test_seed(), .layers = 2});
  const Checkpoint original = Checkpoint::open(per_expert);
  const uint64_t experts = plan_of(per_expert, 1, 1).model.experts;
  write_fused_copy(per_expert, fused, experts);
  // Layer 1 back to its per-expert tensors: the fused copy's other tensors and layer 1's originals.
  const Checkpoint ckpt = Checkpoint::open(fused);
  std::map<std::string, std::vector<std::byte>> data;
  std::vector<TensorToWrite> tensors;
  const auto keep = [&](const Checkpoint& from, const std::string& name) {
    data[name] = tensor_bytes(from, name);
    tensors.push_back({name, from.at(name).info->dtype, from.at(name).info->shape, {}});
  };
  for (const std::string& name : ckpt.tensor_names()) {
    if (!name.starts_with("model.layers.1.mlp.experts.")) keep(ckpt, name);
  }
  for (const std::string& name : original.tensor_names()) {
    if (name.starts_with("model.layers.1.mlp.experts.")) keep(original, name);
  }
  for (TensorToWrite& t : tensors) t.data = data.at(t.name);
  write_safetensors(fused + "/model.safetensors", tensors);
  try {
    plan_of(fused, 2, 2);
    FAIL() << "planned a checkpoint whose layer 1 lacks its fused experts";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnknownTensor) << e.what();
    EXPECT_NE(std::string(e.what()).find("'model.layers.1.mlp.experts."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qwen3_5_fused_test
}  // namespace shardload
