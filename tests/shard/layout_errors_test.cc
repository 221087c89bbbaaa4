// Illegal layouts and inconsistent checkpoints, as a user meets them: `shardload plan` and
// `shardload export` exit non-zero with one line `error: ...` on stderr that says what is wrong
// (and names the tensor when a tensor is at fault). Both commands are held to the same message,
// since export plans first.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "handmade.h"
#include "shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/model.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CommandResult;
using testing::TempDir;

// Runs plan and export with the same layout and expects both to fail with `message` in one error
// line.
void expect_refused(const std::string& model, const std::vector<std::string>& layout,
                    const std::string& message) {
  for (const std::string command : {"plan", "export"}) {
    SCOPED_TRACE(command);
    TempDir out;
    std::vector<std::string> args = {command, model};
    if (command == std::string("export")) args.insert(args.end(), {"--out", out.file("export")});
    args.insert(args.end(), layout.begin(), layout.end());
    const CommandResult result = testing::shardload_cli(args);
    EXPECT_NE(result.exit_code, 0) << result.out;
    EXPECT_LT(result.exit_code, 128) << "killed by a signal: " << result.err;
    EXPECT_TRUE(result.err.starts_with("error: ")) << result.err;
    EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "not one line: " << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos)
        << "expected '" << message << "' in: " << result.err;
    if (command == std::string("export")) {
      // A refused layout is refused before anything is written.
      EXPECT_FALSE(fs::exists(out.file("export") + "/shardload.json")) << "an export was written";
    }
  }
}

std::string write_map(const TempDir& dir, const json& map) {
  const std::string path = dir.file("map.json");
  testing::write_file(path, json{{"physical_to_logical_map", map}}.dump());
  return path;
}

// The default map of the tiny qwen3_moe (3 MoE layers of 8 experts), with one row changed.
json map_with_row(const json& row, size_t at = 0) {
  json map = json::array();
  for (int k = 0; k < 3; ++k) map.push_back(json{0, 1, 2, 3, 4, 5, 6, 7});
  map[at] = row;
  return map;
}

TEST(LayoutErrors, TpNotDividingHeads) {
  expect_refused(testing::tiny_model("llama"), {"--tp", "3"},
                 "tp=3 does not divide 8 attention heads");
  expect_refused(testing::tiny_model("deepseek_v3"), {"--tp", "16"},
                 "tp=16 does not divide 8 attention heads");
}

// GLM-4.5 is grouped-query attention, not MLA: its kv heads must split or replicate evenly, and its
// experts follow the MoE rules.
TEST(LayoutErrors, Glm4MoeKvHeadsAndExperts) {
  const std::string& glm = testing::tiny_model("glm4_moe");
  expect_refused(glm, {"--tp", "16"}, "tp=16 does not divide 8 attention heads");
  expect_refused(glm, {"--tp", "4", "--ep", "3"}, "ep=3 does not divide tp=4");
  expect_refused(glm, {"--tp", "8", "--ep", "8", "--redundant-experts", "3"},
                 "ep=8 does not divide 11 physical experts");
  // 6 heads over 3 kv heads: tp 2 divides the heads but not the kv heads (MLA would not care).
  TempDir dir;
  fs::copy(glm, dir.file("m"));
  json config = json::parse(testing::read_file(dir.file("m/config.json")));
  config["num_attention_heads"] = 6;
  config["num_key_value_heads"] = 3;
  testing::write_file(dir.file("m/config.json"), config.dump());
  expect_refused(dir.file("m"), {"--tp", "2"}, "tp=2 does not divide 3 kv heads");
}

TEST(LayoutErrors, KvHeadsNotSplittable) {
  // 6 heads over 3 kv heads: tp 2 neither divides the kv heads nor is a multiple of them.
  TempDir dir;
  const json config = testing::biased_llama_config();
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  expect_refused(dir.file("m"), {"--tp", "2"}, "tp=2 does not divide 3 kv heads");
}

// The biased Llama of handmade.h with some config fields changed, written with matching tensors.
std::string llama_with(const TempDir& dir, const json& changes) {
  json config = testing::biased_llama_config();
  config.update(changes);
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  return dir.file("m");
}

TEST(LayoutErrors, TpNotAMultipleOfKvHeads) {
  // 12 heads over 4 kv heads: tp 6 outnumbers the kv heads but cannot replicate them evenly.
  TempDir dir;
  expect_refused(
      llama_with(dir, {{"num_attention_heads", 12}, {"num_key_value_heads", 4}, {"head_dim", 4}}),
      {"--tp", "6"}, "tp=6 is not a multiple of 4 kv heads");
}

TEST(LayoutErrors, TpNotDividingPaddedVocabulary) {
  // Vocabulary 50 pads to 64, which tp 3 does not divide.
  TempDir dir;
  expect_refused(llama_with(dir, {{"vocab_size", 50}}), {"--tp", "3"},
                 "tp=3 does not divide the vocabulary padded to 64");
}

TEST(LayoutErrors, TpNotDividingIntermediate) {
  TempDir dir;
  expect_refused(llama_with(dir, {{"intermediate_size", 100}}), {"--tp", "3"},
                 "tp=3 does not divide intermediate size 100");
}

TEST(LayoutErrors, TpOrEpBelowOne) {
  const std::string model = testing::tiny_model("qwen3_moe");
  expect_refused(model, {"--tp", "0"}, "tp=0 must be at least 1");
  expect_refused(model, {"--ep", "0"}, "ep=0 must be at least 1");
}

TEST(LayoutErrors, EpNotDividingTp) {
  expect_refused(testing::tiny_model("qwen3_moe"), {"--tp", "4", "--ep", "3"},
                 "ep=3 does not divide tp=4");
  expect_refused(testing::tiny_model("qwen3_moe"), {"--tp", "2", "--ep", "4"},
                 "ep=4 does not divide tp=2");
}

TEST(LayoutErrors, ExpertOptionsOnADenseModel) {
  const std::string dense = testing::tiny_model("qwen3");
  expect_refused(dense, {"--tp", "2", "--ep", "2"}, "ep=2 needs a model with experts");
  expect_refused(dense, {"--redundant-experts", "2"},
                 "--redundant-experts needs a model with experts");
  TempDir dir;
  expect_refused(dense, {"--expert-map", write_map(dir, json::array({json{0}}))},
                 "--expert-map needs a model with experts");
}

TEST(LayoutErrors, EpNotDividingPhysicalExperts) {
  // 8 + 2 = 10 physical experts over ep 4.
  expect_refused(testing::tiny_model("qwen3_moe"),
                 {"--tp", "4", "--ep", "4", "--redundant-experts", "2"},
                 "ep=4 does not divide 10 physical experts");
}

TEST(LayoutErrors, NegativeRedundantExperts) {
  expect_refused(testing::tiny_model("qwen3_moe"), {"--redundant-experts", "-2"},
                 "--redundant-experts -2 is negative");
  // -1 too: it is not "not given".
  expect_refused(testing::tiny_model("qwen3_moe"), {"--redundant-experts", "-1"},
                 "--redundant-experts -1 is negative");
}

TEST(LayoutErrors, MoeTpNotDividingExpertIntermediate) {
  // Expert intermediate 18: moe tp 4 (tp 4, ep 1) does not divide it; moe tp 2 (tp 4, ep 2) does.
  TempDir dir;
  const json config = testing::odd_expert_qwen3_moe_config();
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  expect_refused(dir.file("m"), {"--tp", "4"},
                 "moe tp=4 (tp/ep) does not divide expert intermediate size 18");
  const CommandResult ok =
      testing::shardload_cli({"plan", dir.file("m"), "--tp", "4", "--ep", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(LayoutErrors, ExpertMapUnknownExpert) {
  TempDir dir;
  expect_refused(testing::tiny_model("qwen3_moe"),
                 {"--expert-map", write_map(dir, map_with_row({0, 1, 2, 3, 4, 5, 6, 9}, 1))},
                 "expert map row 1 names expert 9, but the model has 8 experts");
}

TEST(LayoutErrors, ExpertMapWrongRowCount) {
  TempDir dir;
  json map = map_with_row({0, 1, 2, 3, 4, 5, 6, 7});
  map.erase(map.begin());
  expect_refused(testing::tiny_model("qwen3_moe"), {"--expert-map", write_map(dir, map)},
                 "the expert map has 2 rows for 3 MoE layers");
}

TEST(LayoutErrors, ExpertMapWrongRowLength) {
  TempDir dir;
  expect_refused(testing::tiny_model("qwen3_moe"),
                 {"--expert-map", write_map(dir, map_with_row({0, 1, 2, 3, 4, 5, 6, 7, 0}, 2))},
                 "expert map row 2 has 9 entries, expected 8");
}

TEST(LayoutErrors, ExpertMapMissingALogicalExpert) {
  TempDir dir;
  expect_refused(testing::tiny_model("qwen3_moe"),
                 {"--expert-map", write_map(dir, map_with_row({0, 1, 2, 3, 4, 5, 6, 6}))},
                 "expert map row 0 places 7 of 8 logical experts");
}

TEST(LayoutErrors, ExpertMapFewerPhysicalThanLogical) {
  TempDir dir;
  expect_refused(
      testing::tiny_model("qwen3_moe"),
      {"--expert-map", write_map(dir, json::array({json{0, 1, 2}, json{0, 1, 2}, json{0, 1, 2}}))},
      "the expert map has 3 physical experts, fewer than 8 logical");
}

TEST(LayoutErrors, RedundantExpertsDisagreeWithTheMap) {
  TempDir dir;
  const json row = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1};
  const std::string map = write_map(dir, json::array({row, row, row}));
  expect_refused(
      testing::tiny_model("qwen3_moe"), {"--expert-map", map, "--redundant-experts", "1"},
      "--redundant-experts 1 disagrees with the expert map (10 physical - 8 logical = 2)");
  const CommandResult ok = testing::shardload_cli(
      {"plan", testing::tiny_model("qwen3_moe"), "--expert-map", map, "--redundant-experts", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// The map check on its own (a rebalance checks its map with it): the slots per layer, or the same
// errors as --expert-map.
TEST(LayoutErrors, ExpertMapCheckAlone) {
  const ModelConfig model =
      ModelConfig::from_json(Checkpoint::open(testing::tiny_model("qwen3_moe")).config());
  const std::vector<int> row = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1};
  EXPECT_EQ(validate_expert_map(model, {row, row, row}), 10u);
  EXPECT_EQ(validate_expert_map(model, {row, row, row}, 2), 10u);
  try {
    validate_expert_map(model, {row, row, {0, 1, 2, 3, 4, 5, 6, 6, 6, 6}});
    ADD_FAILURE() << "a row missing an expert passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("expert map row 2 places 7 of 8 logical experts"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(validate_expert_map(model, {row, row, row}, 1), Error);
  EXPECT_THROW(validate_expert_map(model, {}), Error);
}

TEST(LayoutErrors, ExpertMapFileProblems) {
  TempDir dir;
  const std::string model = testing::tiny_model("qwen3_moe");
  expect_refused(model, {"--expert-map", dir.file("absent.json")}, "cannot open expert map");
  testing::write_file(dir.file("bad.json"), "{\"physical_to_logical_map\": [[0, 1,");
  expect_refused(model, {"--expert-map", dir.file("bad.json")}, "invalid JSON");
  testing::write_file(dir.file("none.json"), "{\"map\": []}");
  expect_refused(model, {"--expert-map", dir.file("none.json")}, "no physical_to_logical_map list");
  testing::write_file(dir.file("neg.json"), "{\"physical_to_logical_map\": [[0, -1]]}");
  expect_refused(model, {"--expert-map", dir.file("neg.json")},
                 "an entry is not an expert index (expected a logical expert number from 0, found -1)");
}

TEST(LayoutErrors, SharedExpertIntermediateNotDividing) {
  // The tiny families' shared experts divide every tp their heads allow, so a hand-made Qwen2-MoE
  // with a shared expert intermediate size of 34. The layout is refused before any tensor is
  // matched (plan.h), so the tensor list does not need the shared expert.
  TempDir dir;
  json config = testing::odd_expert_qwen3_moe_config();
  config["architectures"] = {"Qwen2MoeForCausalLM"};
  config["moe_intermediate_size"] = 16;
  config["shared_expert_intermediate_size"] = 34;
  testing::write_handmade(dir.file("m"), config, testing::handmade_tensors(config),
                          testing::test_seed());
  expect_refused(dir.file("m"), {"--tp", "4", "--ep", "2"},
                 "tp=4 does not divide shared expert intermediate size 34");
}

// ---- checkpoints that disagree with their config ----

// The biased Llama with one change to its tensor list.
std::string broken_llama(const TempDir& dir, void (*change)(std::vector<testing::HandTensor>&)) {
  const json config = testing::biased_llama_config();
  std::vector<testing::HandTensor> tensors = testing::handmade_tensors(config);
  change(tensors);
  testing::write_handmade(dir.file("m"), config, tensors, testing::test_seed());
  return dir.file("m");
}

// Data-parallel attention (layout.md "Data-parallel attention"): D must divide T, and each group's
// checks use the size of the group that splits it, named in the message.
TEST(LayoutErrors, DataParallelSizes) {
  const std::string& llama = testing::tiny_model("llama");  // 8 heads, 2 kv heads, vocab 1000
  expect_refused(llama, {"--tp", "8", "--dp", "3"}, "dp=3 does not divide tp=8");
  expect_refused(llama, {"--tp", "8", "--dp", "0"}, "dp=0 must be at least 1");
  expect_refused(llama, {"--tp", "6", "--dp", "2"},
                 "attention tp=3 (tp=6 / dp=2) does not divide 8 attention heads");
  // The embedding is replicated under SGLang's DP attention, but lm_head stays over all 6 ranks.
  expect_refused(llama, {"--tp", "6", "--dp", "3"},
                 "tp=6 does not divide the vocabulary padded to 1024 (lm_head)");
  for (const auto& fix : {std::vector<std::string>{"--enable-dp-lm-head"}, {"--dp-style", "vllm"}}) {
    std::vector<std::string> args = {"plan", llama, "--tp", "6", "--dp", "3"};
    args.insert(args.end(), fix.begin(), fix.end());
    const CommandResult result = testing::shardload_cli(args);
    EXPECT_EQ(result.exit_code, 0) << fix.front() << ": " << result.err;
  }
  expect_refused(llama, {"--tp", "4", "--moe-dense-tp-size", "2"},
                 "--moe-dense-tp-size 2: only 1 (dense MLPs replicated) or the --tp 4 is supported");
  expect_refused(testing::tiny_model("qwen3_moe"),
                 {"--tp", "4", "--dp", "2", "--moe-a2a-backend", "deepep", "--ep", "2"},
                 "--moe-a2a-backend deepep means --ep 4 (the --tp), not --ep 2");
}

// Block FP8 cuts on 128 are checked per group: DeepSeek-V3's attention, dense MLP and shared experts
// cut over 8 ranks fall inside blocks, each refused naming its group, until the engines' large-EP
// layout keeps them whole (attention over 1 rank, dense MLP and shared experts replicated).
TEST(LayoutErrors, BlockFp8CutsNameTheirGroup) {
  TempDir dir;
  make_tiny({.arch = "deepseek_v3", .out = dir.file("m"), .seed = testing::test_seed(), .quant = "fp8-block"});
  const std::string model = dir.file("m");
  expect_refused(model, {"--tp", "8", "--ep", "4"}, "(group attention, split over 8 ranks)");
  expect_refused(model, {"--tp", "8", "--ep", "4", "--dp", "8", "--no-split-shared-experts"},
                 "(group dense_mlp, split over 8 ranks)");
  expect_refused(model, {"--tp", "8", "--ep", "4", "--dp", "8", "--moe-dense-tp-size", "1"},
                 "(group shared_experts, split over 8 ranks)");
  const CommandResult ok =
      testing::shardload_cli({"plan", model, "--tp", "8", "--ep", "4", "--dp", "8", "--moe-dense-tp-size", "1",
                              "--no-split-shared-experts", "--enable-dp-attention"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("dp=8 attn_tp=1 dp_style=sglang, scopes: attention=attention embedding=replicated "
                        "lm_head=world dense_mlp=replicated shared_experts=replicated"),
            std::string::npos)
      << ok.out;
  EXPECT_NE(ok.out.find("rank 7 (ep 3, moe_tp 1, dp 7, attn_tp 0)"), std::string::npos) << ok.out;
}

TEST(CheckpointErrors, UnknownTensor) {
  TempDir dir;
  const std::string model = broken_llama(dir, [](std::vector<testing::HandTensor>& t) {
    t.push_back({"model.layers.0.self_attn.extra_proj.weight", {8, 48}});
  });
  expect_refused(model, {"--tp", "3"},
                 "tensor 'model.layers.0.self_attn.extra_proj.weight': no rule of LlamaForCausalLM "
                 "consumes or "
                 "skips it");
}

TEST(CheckpointErrors, MissingTensor) {
  TempDir dir;
  const std::string model = broken_llama(dir, [](std::vector<testing::HandTensor>& t) {
    std::erase_if(t, [](const testing::HandTensor& x) {
      return x.name == "model.layers.1.mlp.up_proj.weight";
    });
  });
  expect_refused(model, {"--tp", "3"},
                 "tensor 'model.layers.1.mlp.up_proj.weight': missing from the checkpoint");
}

TEST(CheckpointErrors, MissingBiasOfAnAttentionBiasModel) {
  TempDir dir;
  const std::string model = broken_llama(dir, [](std::vector<testing::HandTensor>& t) {
    std::erase_if(t, [](const testing::HandTensor& x) {
      return x.name == "model.layers.0.self_attn.o_proj.bias";
    });
  });
  expect_refused(model, {},
                 "tensor 'model.layers.0.self_attn.o_proj.bias': missing from the checkpoint");
}

TEST(CheckpointErrors, MisShapedTensor) {
  TempDir dir;
  const std::string model = broken_llama(dir, [](std::vector<testing::HandTensor>& t) {
    for (testing::HandTensor& x : t) {
      if (x.name == "model.layers.1.self_attn.k_proj.weight") x.shape = {16, 48};
    }
  });
  expect_refused(
      model, {"--tp", "3"},
      "tensor 'model.layers.1.self_attn.k_proj.weight': shape: shape disagrees with config.json "
      "(expected [24, 48], found [16, 48])");
}

TEST(CheckpointErrors, MisShapedExpert) {
  TempDir dir;
  json config = testing::odd_expert_qwen3_moe_config();
  std::vector<testing::HandTensor> tensors = testing::handmade_tensors(config);
  for (testing::HandTensor& x : tensors) {
    if (x.name == "model.layers.1.mlp.experts.3.down_proj.weight") x.shape = {32, 16};
  }
  testing::write_handmade(dir.file("m"), config, tensors, testing::test_seed());
  expect_refused(dir.file("m"), {"--tp", "2"},
                 "tensor 'model.layers.1.mlp.experts.3.down_proj.weight': shape: shape disagrees "
                 "with config.json "
                 "(expected [32, 18], found [32, 16])");
}

}  // namespace
}  // namespace shardload
