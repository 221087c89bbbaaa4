// The property of an export: the rank files alone (with the manifest and the copied config.json)
// give back every checkpoint tensor, for every architecture family and every kind of layout. The
// inverse is reassemble.h, written from docs/layout.md apart from the planner, so that a
// rule the engine gets wrong cannot be "confirmed" by the same code.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compare.h"
#include "export_reader.h"
#include "handmade.h"
#include "reassemble.h"
#include "shard_test_util.h"
#include "shardload/checkpoint.h"
#include "shardload/convert.h"
#include "shardload/tiny.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CommandResult;
using testing::ExportContents;
using testing::Problems;
using testing::TempDir;

// A float16 Llama with config defaults and a tied head present in the checkpoint; made once.
const std::string& plain_llama() {
  static TempDir root;
  static const std::string dir = [] {
    const std::string path = root.file("plain_llama");
    const json config = testing::plain_llama_config();
    std::vector<testing::HandTensor> tensors = testing::handmade_tensors(config, DType::kF16);
    tensors.push_back(
        {"lm_head.weight", {150, 48}, testing::HandTensor::Kind::kWeight, DType::kF16});
    testing::write_handmade(path, config, tensors, testing::test_seed());
    return path;
  }();
  return dir;
}

// A larger Llama (hidden 1024, intermediate 3072, one layer): its tensors span several of the
// loader's 4 MiB read jobs.
const std::string& larger_llama() {
  static TempDir root;
  static const std::string dir = [] {
    const std::string path = root.file("larger_llama");
    make_tiny({.arch = "llama",
               .out = path,
               .seed = testing::test_seed(),
               .layers = 1,
               .size_bytes = 30'000'000});
    return path;
  }();
  return dir;
}

// The biased Llama stored in float32 with one value in 8 a special one (handmade.h): every cast has
// ties, subnormals, overflow, infinities and NaN to get right.
const std::string& special_llama() {
  static TempDir root;
  static const std::string dir = [] {
    const std::string path = root.file("special_llama");
    json config = testing::biased_llama_config();
    config["torch_dtype"] = "float32";
    testing::write_handmade(path, config, testing::handmade_tensors(config, DType::kF32),
                            testing::test_seed(), /*special=*/true);
    return path;
  }();
  return dir;
}

// A checkpoint with row-parallel biases, which no tiny family has; made once.
const std::string& biased_llama() {
  static TempDir root;
  static const std::string dir = [] {
    const std::string path = root.file("biased_llama");
    const json config = testing::biased_llama_config();
    testing::write_handmade(path, config, testing::handmade_tensors(config), testing::test_seed());
    return path;
  }();
  return dir;
}

const std::vector<std::string> kDense = {"llama", "qwen2", "qwen3", "qwen3_5"};
const std::vector<std::string> kMoe = {"qwen2_moe",    "qwen3_moe",    "mixtral",     "deepseek_v2", "deepseek_v3",
                                       "deepseek_v32", "ernie4_5_moe", "glm4_moe",    "minimax_m2",
                                       "qwen3_next", "llama4",      "glm4_moe_lite", "glm_moe_dsa", "qwen3_5_moe",
                                       "gemma4"};

struct Case {
  std::string label = {};
  std::string model = {};  // a tiny family, or "biased_llama", "plain_llama", "larger_llama"
  int tp = 1;
  int ep = 1;
  std::optional<int> redundant = {};
  bool custom_map = false;  // a permuted map with 4 replicas per layer
  bool divided = false;     // --row-bias divided
  bool no_split = false;    // --no-split-shared-experts
  std::string dtype = "auto";
  std::string max_file_size = {};  // --max-file-size: several parts per rank
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

// Every family at tp 1, 2 and 4, MoE families also at tp 4 x ep 2 and x ep 4, with redundant
// experts and with a custom map. The fp16 and fp32 casts ride on the tp 2 and tp 4 (x ep 2)
// layouts: each export costs a process start, which dominates under the sanitizers.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string& f : kDense) {
    cases.push_back({.label = f + "_tp1", .model = f});
    cases.push_back({.label = f + "_tp2_fp16", .model = f, .tp = 2, .dtype = "fp16"});
    cases.push_back({.label = f + "_tp4", .model = f, .tp = 4});
    cases.push_back({.label = f + "_tp4_fp32", .model = f, .tp = 4, .dtype = "fp32"});
  }
  for (const std::string& f : kMoe) {
    cases.push_back({.label = f + "_tp1", .model = f});
    cases.push_back({.label = f + "_tp2_fp16", .model = f, .tp = 2, .dtype = "fp16"});
    cases.push_back({.label = f + "_tp4", .model = f, .tp = 4});
    cases.push_back({.label = f + "_tp4_ep2_fp32", .model = f, .tp = 4, .ep = 2, .dtype = "fp32"});
    cases.push_back({.label = f + "_tp4_ep4", .model = f, .tp = 4, .ep = 4});
    cases.push_back(
        {.label = f + "_tp4_ep2_redundant2", .model = f, .tp = 4, .ep = 2, .redundant = 2});
    cases.push_back(
        {.label = f + "_tp4_ep2_custom_map", .model = f, .tp = 4, .ep = 2, .custom_map = true});
  }
  for (const std::string f : {"qwen2_moe", "deepseek_v3", "ernie4_5_moe", "glm4_moe"}) {
    cases.push_back(
        {.label = f + "_tp4_ep2_no_split_shared", .model = f, .tp = 4, .ep = 2, .no_split = true});
  }
  // tp 8: four ranks to a kv head; El = 1 with ep 8; moe tp 4; redundant experts without ep.
  cases.push_back({.label = "llama_tp8", .model = "llama", .tp = 8});
  cases.push_back({.label = "qwen3_moe_tp8_ep4", .model = "qwen3_moe", .tp = 8, .ep = 4});
  cases.push_back({.label = "mixtral_tp8_ep2", .model = "mixtral", .tp = 8, .ep = 2});
  cases.push_back({.label = "deepseek_v3_tp8_ep8_redundant8",
                   .model = "deepseek_v3",
                   .tp = 8,
                   .ep = 8,
                   .redundant = 8});
  cases.push_back(
      {.label = "qwen2_moe_tp2_redundant3", .model = "qwen2_moe", .tp = 2, .redundant = 3});
  cases.push_back({.label = "qwen3_moe_tp2_ep2_parts_64K",
                   .model = "qwen3_moe",
                   .tp = 2,
                   .ep = 2,
                   .max_file_size = "64K"});
  // Row-parallel biases: divided by 3 and 6, which round, and kept whole.
  const std::string b = "biased_llama";
  cases.push_back({.label = b + "_tp1_divided", .model = b, .divided = true});
  cases.push_back({.label = b + "_tp3_full", .model = b, .tp = 3});
  cases.push_back({.label = b + "_tp3_divided", .model = b, .tp = 3, .divided = true});
  cases.push_back(
      {.label = b + "_tp6_divided_fp16", .model = b, .tp = 6, .divided = true, .dtype = "fp16"});
  cases.push_back({.label = b + "_tp6_full_fp16", .model = b, .tp = 6, .dtype = "fp16"});
  // Config defaults (kv heads = heads, head_dim = hidden / heads), a float16 checkpoint, a tied
  // head.
  cases.push_back({.label = "plain_llama_tp3", .model = "plain_llama", .tp = 3});
  cases.push_back(
      {.label = "plain_llama_tp6_bf16", .model = "plain_llama", .tp = 6, .dtype = "bf16"});
  cases.push_back(
      {.label = "plain_llama_tp2_fp32", .model = "plain_llama", .tp = 2, .dtype = "fp32"});
  const std::string sp = "special_llama";
  cases.push_back(
      {.label = sp + "_tp3_divided_bf16", .model = sp, .tp = 3, .divided = true, .dtype = "bf16"});
  cases.push_back(
      {.label = sp + "_tp3_divided_fp16", .model = sp, .tp = 3, .divided = true, .dtype = "fp16"});
  cases.push_back({.label = sp + "_tp6_divided", .model = sp, .tp = 6, .divided = true});
  cases.push_back(
      {.label = "larger_llama_tp2_fp32", .model = "larger_llama", .tp = 2, .dtype = "fp32"});
  return cases;
}

// The MoE layers of a checkpoint (decoder layers with routed experts), counted from its tensor
// names (per-expert tensors, or Llama-4's fused ones).
int moe_layer_count(const Checkpoint& ckpt, const testing::ConfigView& config) {
  std::set<int> layers;
  for (const std::string& name : ckpt.tensor_names()) {
    const int layer = testing::layer_of(name);
    if (layer >= 0 && layer < config.layers &&
        (name.find(".experts.0.") != std::string::npos || name.ends_with(".experts.gate_up_proj"))) {
      layers.insert(layer);
    }
  }
  return static_cast<int>(layers.size());
}

// Every logical expert once, permuted differently per layer, then 4 replicas.
std::vector<std::vector<int>> custom_map(int layers, int experts) {
  std::vector<std::vector<int>> map(static_cast<size_t>(layers));
  for (int k = 0; k < layers; ++k) {
    for (int p = 0; p < experts + 4; ++p) {
      map[static_cast<size_t>(k)].push_back(p < experts ? (experts - 1 - p + k) % experts
                                                        : (3 * p + k) % experts);
    }
  }
  return map;
}

std::string dtype_spelling(const std::string& option, const json& config) {
  if (option == "fp16") return "F16";
  if (option == "fp32") return "F32";
  if (option == "bf16") return "BF16";
  const std::string torch = config.value("torch_dtype", config.value("dtype", "bfloat16"));
  return torch == "float16" ? "F16" : torch == "float32" ? "F32" : "BF16";
}

bool is_rank_file(const std::string& name) {
  return name.starts_with("model-rank-") && name.ends_with(".safetensors");
}

// layout.md "Files": every other top-level file of the model directory is copied unchanged, and
// nothing else lands in OUT.
void check_side_files(const std::string& model, const std::string& out, Problems& problems) {
  std::set<std::string> expected = {"shardload.json"};
  for (const auto& entry : fs::directory_iterator(model)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.ends_with(".safetensors") || name.ends_with(".bin") ||
        name.ends_with(".pt") || name.ends_with(".pth") ||
        name.ends_with(".safetensors.index.json")) {
      continue;
    }
    expected.insert(name);
    const fs::path copy = fs::path(out) / name;
    if (!fs::exists(copy)) {
      problems.add("{} was not copied beside the export", name);
    } else if (testing::read_file(copy.string()) != testing::read_file(entry.path().string())) {
      problems.add("{} was copied with different bytes", name);
    }
  }
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (!expected.contains(name) && !is_rank_file(name))
      problems.add("unexpected {} in the export", name);
  }
}

void check_manifest(const json& m, const Case& c, const json& config, const std::string& dtype,
                    int redundant, const std::vector<std::vector<int>>& map, Problems& problems) {
  auto expect = [&](const char* key, const json& value) {
    if (!m.contains(key)) return problems.add("shardload.json has no {}", key);
    if (m.at(key) != value)
      problems.add("shardload.json {} is {}, expected {}", key, m.at(key).dump(), value.dump());
  };
  expect("format", "shardload/1");
  expect("architecture", config.at("architectures").at(0));
  expect("tp_size", c.tp);
  expect("ep_size", c.ep);
  expect("moe_tp_size", c.tp / c.ep);
  expect("dtype", dtype);
  expect("quantization", "none");
  expect("postprocessed", true);
  expect("row_bias", c.divided ? "divided" : "full");
  expect("no_split_shared_experts", c.no_split);
  expect("redundant_experts", redundant);
  expect("physical_to_logical_map", map.empty() ? json::array() : json(map));
  if (!m.contains("ranks") || !m.at("ranks").is_array())
    return problems.add("shardload.json has no ranks list");
  for (size_t r = 0; r < m.at("ranks").size(); ++r) {
    if (m.at("ranks")[r].value("rank", -1) != static_cast<int>(r)) {
      problems.add("shardload.json ranks[{}] is {}", r, m.at("ranks")[r].dump());
    }
  }
}

// layout.md "Files": a part is closed when the next tensor would take it past --max-file-size,
// unless it is still empty. The order of tensors inside a file is free, so what can be seen is: a
// part over the limit holds one tensor, and no tensor of the next part would have fitted in the one
// before.
void check_parts(const ExportContents& contents, uint64_t limit, Problems& problems) {
  for (const auto& parts : contents.parts) {
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::vector<uint64_t>& sizes = parts[k].tensor_bytes;
      const uint64_t bytes = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
      if (bytes > limit && sizes.size() > 1) {
        problems.add("{}: {} tensors, {} bytes, over the limit of {}", parts[k].name, sizes.size(),
                     bytes, limit);
      }
      if (k + 1 < parts.size()) {
        const std::vector<uint64_t>& next = parts[k + 1].tensor_bytes;
        const uint64_t largest = next.empty() ? 0 : *std::max_element(next.begin(), next.end());
        if (bytes + largest <= limit) {
          problems.add("{} was closed at {} bytes, but every tensor of the next part fits in it",
                       parts[k].name, bytes);
        }
      }
    }
  }
}

uint64_t parse_size(const std::string& text) {
  const uint64_t number = std::stoull(text);
  switch (text.back()) {
    case 'K':
      return number << 10;
    case 'M':
      return number << 20;
    case 'G':
      return number << 30;
    default:
      return number;
  }
}

class ExportProperty : public ::testing::TestWithParam<Case> {};

TEST_P(ExportProperty, RanksReassembleToTheCheckpoint) {
  const Case& c = GetParam();
  const uint64_t seed = testing::test_seed();
  SCOPED_TRACE(::testing::Message() << c.label << ", seed " << seed);
  const std::string model = c.model == "biased_llama"    ? biased_llama()
                            : c.model == "plain_llama"   ? plain_llama()
                            : c.model == "larger_llama"  ? larger_llama()
                            : c.model == "special_llama" ? special_llama()
                                                         : testing::tiny_model(c.model);
  const Checkpoint ckpt = Checkpoint::open(model);
  const testing::ConfigView config = testing::ConfigView::from_json(ckpt.config());

  TempDir work;
  const std::string out = work.file("export");
  std::vector<std::string> args = {
      "export",  model,  "--out", out, "--tp", std::to_string(c.tp), "--ep", std::to_string(c.ep),
      "--dtype", c.dtype};
  if (c.redundant) args.insert(args.end(), {"--redundant-experts", std::to_string(*c.redundant)});
  if (c.divided) args.insert(args.end(), {"--row-bias", "divided"});
  if (c.no_split) args.push_back("--no-split-shared-experts");
  if (!c.max_file_size.empty()) args.insert(args.end(), {"--max-file-size", c.max_file_size});

  // The map the manifest must carry: the default p -> p % E, or the one given.
  std::vector<std::vector<int>> map;
  int redundant = c.redundant.value_or(0);
  const int moe_layers = config.experts > 0 ? moe_layer_count(ckpt, config) : 0;
  const int experts = static_cast<int>(config.experts);
  if (c.custom_map) {
    map = custom_map(moe_layers, experts);
    redundant = 4;
    const std::string map_file = work.file("map.json");
    testing::write_file(map_file, json{{"physical_to_logical_map", map}}.dump());
    args.insert(args.end(), {"--expert-map", map_file});
  } else if (moe_layers > 0) {
    std::vector<int> row;
    for (int p = 0; p < experts + redundant; ++p) row.push_back(p % experts);
    map.assign(static_cast<size_t>(moe_layers), row);
  }

  const CommandResult result = testing::shardload_cli(args);
  ASSERT_EQ(result.exit_code, 0) << "shardload export failed: " << result.err;

  Problems problems;
  const std::string dtype = dtype_spelling(c.dtype, ckpt.config());
  const ExportContents contents = testing::read_export(out, problems);
  check_manifest(contents.manifest, c, ckpt.config(), dtype, redundant, map, problems);
  check_side_files(model, out, problems);
  const uint64_t limit = c.max_file_size.empty() ? uint64_t{5} << 30 : parse_size(c.max_file_size);
  check_parts(contents, limit, problems);
  if (!c.max_file_size.empty() && contents.parts.at(0).size() < 2) {
    problems.add("--max-file-size {} left rank 0 in one part", c.max_file_size);
  }
  const testing::RebuiltCheckpoint rebuilt = testing::reassemble(contents, problems);
  testing::compare_with_checkpoint(ckpt, rebuilt, *parse_dtype(dtype), problems);
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems:\n" << problems.text();
}

// Whether an export passes every check of this file but the manifest's (the reassembler and the
// comparison).
std::string faults(const ExportContents& contents, const Checkpoint& ckpt,
                   DType dtype = DType::kBF16) {
  Problems problems;
  const testing::RebuiltCheckpoint rebuilt = testing::reassemble(contents, problems);
  testing::compare_with_checkpoint(ckpt, rebuilt, dtype, problems);
  return problems.text();
}

void flip_byte(testing::HostTensor& t, uint64_t offset) { t.bytes.at(offset) ^= std::byte{0x40}; }

// The checks must see the faults they exist to catch: each mutation of a good export is one such
// fault.
TEST(ExportPropertySelfCheck, ReassemblerSeesEachFault) {
  // tp 4 x ep 2 with 2 redundant experts: P = 10, El = 5, moe tp 2; physical 8 (logical 0) is slot
  // 3 of ranks 2 and 3. 8 heads of 32 over 2 kv heads: nq = 2, so k rows start at 64 and ranks 0, 1
  // share kv head 0.
  const std::string model = testing::tiny_model("qwen3_moe");
  TempDir work;
  const std::string out = work.file("export");
  const CommandResult result = testing::shardload_cli(
      {"export", model, "--out", out, "--tp", "4", "--ep", "2", "--redundant-experts", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Checkpoint ckpt = Checkpoint::open(model);
  Problems read_problems;
  const ExportContents good = testing::read_export(out, read_problems);
  ASSERT_TRUE(read_problems.empty()) << read_problems.text();
  ASSERT_EQ(faults(good, ckpt), "");

  const std::string l1 = "model.layers.1.";
  const std::vector<std::pair<std::string, std::function<void(ExportContents&)>>> mutations = {
      {"a kv head replica differs",
       [](ExportContents& c) {
         testing::HostTensor& t = c.ranks[1].at("model.layers.0.self_attn.qkv_proj.weight");
         flip_byte(t, 64 * t.row_bytes());
       }},
      {"a vocab padding row is not zero",
       [](ExportContents& c) {
         testing::HostTensor& t = c.ranks[3].at("model.embed_tokens.weight");
         flip_byte(t, t.bytes.size() - 1);
       }},
      {"an expert replica differs",
       [&](ExportContents& c) {
         testing::HostTensor& t = c.ranks[2].at(l1 + "mlp.experts.w13_weight");
         flip_byte(t, 3 * t.row_bytes() + 10);
       }},
      {"two expert slots are swapped",
       [](ExportContents& c) {
         for (int r : {0, 1}) {
           testing::HostTensor& t = c.ranks[r].at("model.layers.2.mlp.experts.w2_weight");
           std::swap_ranges(t.bytes.begin(), t.bytes.begin() + t.row_bytes(),
                            t.bytes.begin() + t.row_bytes());
         }
       }},
      {"a replicated norm differs",
       [](ExportContents& c) {
         flip_byte(c.ranks[2].at("model.layers.0.input_layernorm.weight"), 0);
       }},
      {"a value is off", [](ExportContents& c) { flip_byte(c.ranks[1].at("lm_head.weight"), 0); }},
      {"q_norm is not float32",
       [](ExportContents& c) {
         for (auto& rank : c.ranks) {
           testing::HostTensor& t = rank.at("model.layers.0.self_attn.q_norm.weight");
           std::vector<std::byte> bf16(t.bytes.size() / 2);
           convert(DType::kF32, t.bytes.data(), DType::kBF16, bf16.data(), bf16.size() / 2);
           t = {DType::kBF16, t.shape, bf16};
         }
       }},
      {"a tensor is lost",
       [](ExportContents& c) {
         for (auto& rank : c.ranks) rank.erase("model.layers.1.post_attention_layernorm.weight");
       }},
      {"a tensor is on one rank only",
       [](ExportContents& c) { c.ranks[3].erase("model.norm.weight"); }},
      {"an unknown tensor",
       [](ExportContents& c) {
         for (auto& rank : c.ranks)
           rank["model.layers.0.mlp.extra.weight"] = rank.at("model.norm.weight");
       }},
      {"the map disagrees with the slots",
       [](ExportContents& c) { c.manifest["physical_to_logical_map"][0][8] = 1; }},
  };
  for (const auto& [what, mutate] : mutations) {
    ExportContents bad = good;
    mutate(bad);
    EXPECT_NE(faults(bad, ckpt), "") << "not seen: " << what;
  }
}

TEST(ExportPropertySelfCheck, DividedRowBiasIsSeen) {
  // A bias divided by 3 in float32 and rounded to fp16 is not the full bias, nor the full bias
  // rounded and then divided: the comparison tells them apart.
  TempDir work;
  const std::string out = work.file("export");
  const CommandResult result =
      testing::shardload_cli({"export", biased_llama(), "--out", out, "--tp", "3", "--row-bias",
                              "divided", "--dtype", "fp16"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Checkpoint ckpt = Checkpoint::open(biased_llama());
  Problems read_problems;
  ExportContents contents = testing::read_export(out, read_problems);
  ASSERT_TRUE(read_problems.empty()) << read_problems.text();
  ASSERT_EQ(faults(contents, ckpt, DType::kF16), "");
  contents.manifest["row_bias"] = "full";
  EXPECT_NE(faults(contents, ckpt, DType::kF16), "");
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, ExportProperty, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.label;
                         });

}  // namespace
}  // namespace shardload
