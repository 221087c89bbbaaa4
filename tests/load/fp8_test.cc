// FP8 post-processing through real checkpoints made by make-tiny: code-exact requantization and dynamic
// quantization against a float64 reference written here (not the library's converter), idempotent loads,
// a negative control that forces a second pass, and partial loads that leave other modules untouched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "fp8_reference.h"
#include "poke.h"
#include "run_command.h"
#include "shardload/convert.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

using ::shardload::testing::fp8_reference;
using ::shardload::testing::fp8_value;

void expect_within_one_code(uint8_t got, uint8_t want, const std::string& where) {
  ASSERT_TRUE(::shardload::testing::within_one_code(got, want))
      << where << ": got code " << int(got) << ", reference " << int(want);
}

std::string make_model(const TempDir& dir, const std::string& arch, const std::string& quant, uint64_t seed) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file(arch + "-" + quant + "-" + std::to_string(seed));
  options.seed = seed;
  options.quant = quant;
  make_tiny(options);
  return options.out;
}

std::vector<std::byte> read_tensor(const Checkpoint& ckpt, const std::string& name) {
  const Checkpoint::Entry* entry = ckpt.find(name);
  EXPECT_NE(entry, nullptr) << name;
  std::vector<std::byte> out(entry->info->nbytes());
  ckpt.files()[entry->file].read(*entry->info, out);
  return out;
}

float read_scalar(const Checkpoint& ckpt, const std::string& name) {
  const std::vector<std::byte> bytes = read_tensor(ckpt, name);
  float value = 0;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

const PlanParam& param(const RankPlan& rank, const std::string& name) {
  for (const PlanParam& p : rank.params) {
    if (p.name == name) return p;
  }
  throw std::runtime_error("no parameter " + name);
}

std::vector<float> floats(const RankWeights& w, const PlanParam& p) {
  std::vector<float> out(p.nbytes / 4);
  std::memcpy(out.data(), w.buffer.data() + p.offset, p.nbytes);
  return out;
}

const uint8_t* codes(const RankWeights& w, const PlanParam& p) {
  return reinterpret_cast<const uint8_t*>(w.buffer.data() + p.offset);
}

Plan plan_of(const Checkpoint& ckpt, int tp, int ep, bool dynamic = false) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  parallel.quantize_fp8 = dynamic;
  return make_plan(ckpt, parallel);
}

// Checks rows of a loaded FP8 tensor against checkpoint parts requantized to scale m in float64.
void expect_requantized(const Checkpoint& ckpt, const uint8_t* got, const std::vector<std::string>& parts,
                        float m) {
  size_t at = 0;
  for (const std::string& part : parts) {
    const std::vector<std::byte> raw = read_tensor(ckpt, part + ".weight");
    const float s = read_scalar(ckpt, part + ".weight_scale");
    for (size_t i = 0; i < raw.size(); ++i, ++at) {
      const double x = fp8_value(static_cast<uint8_t>(raw[i])) * double(s) / double(m);
      expect_within_one_code(got[at], fp8_reference(x), part + " element " + std::to_string(i));
    }
  }
}

TEST(Fp8StaticTest, FusedPartsAreRequantizedToTheLargestScaleCodeExact) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe", "fp8", 5));
  const Plan plan = plan_of(ckpt, 1, 1);
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan);
  const RankPlan& rank = plan.ranks[0];
  const std::string a = "model.layers.0.self_attn.";
  const float sq = read_scalar(ckpt, a + "q_proj.weight_scale");
  const float sk = read_scalar(ckpt, a + "k_proj.weight_scale");
  const float sv = read_scalar(ckpt, a + "v_proj.weight_scale");
  ASSERT_TRUE(sq != sk || sk != sv) << "the fixture must give fused parts different scales";
  const float m = std::max({sq, sk, sv});
  EXPECT_EQ(floats(ranks[0], param(rank, a + "qkv_proj.weight_scale")), std::vector<float>{m});
  const float input = std::max({read_scalar(ckpt, a + "q_proj.input_scale"),
                                read_scalar(ckpt, a + "k_proj.input_scale"),
                                read_scalar(ckpt, a + "v_proj.input_scale")});
  EXPECT_EQ(floats(ranks[0], param(rank, a + "qkv_proj.input_scale")), std::vector<float>{input});
  expect_requantized(ckpt, codes(ranks[0], param(rank, a + "qkv_proj.weight")),
                     {a + "q_proj", a + "k_proj", a + "v_proj"}, m);

  // Experts: per expert to max(gate, up), w13_weight_scale keeps [E, 2]; input scales are rank maxima.
  const std::string e = "model.layers.1.mlp.experts.";
  const PlanParam& w13 = param(rank, e + "w13_weight");
  const PlanParam& w13_scale = param(rank, e + "w13_weight_scale");
  ASSERT_EQ(w13_scale.shape, (Shape{w13.shape[0], 2}));
  const std::vector<float> merged = floats(ranks[0], w13_scale);
  float w13_input = 0;
  float w2_input = 0;
  for (uint64_t x = 0; x < w13.shape[0]; ++x) {
    const std::string ex = e + std::to_string(x) + ".";
    const float mx = std::max(read_scalar(ckpt, ex + "gate_proj.weight_scale"),
                              read_scalar(ckpt, ex + "up_proj.weight_scale"));
    EXPECT_EQ(merged[2 * x], mx);
    EXPECT_EQ(merged[2 * x + 1], mx);
    expect_requantized(ckpt, codes(ranks[0], w13) + x * (w13.nbytes / w13.shape[0]),
                       {ex + "gate_proj", ex + "up_proj"}, mx);
    EXPECT_EQ(floats(ranks[0], param(rank, e + "w2_weight_scale"))[x],
              read_scalar(ckpt, ex + "down_proj.weight_scale"));
    w13_input = std::max({w13_input, read_scalar(ckpt, ex + "gate_proj.input_scale"),
                          read_scalar(ckpt, ex + "up_proj.input_scale")});
    w2_input = std::max(w2_input, read_scalar(ckpt, ex + "down_proj.input_scale"));
  }
  for (float v : floats(ranks[0], param(rank, e + "w13_input_scale"))) EXPECT_EQ(v, w13_input);
  for (float v : floats(ranks[0], param(rank, e + "w2_input_scale"))) EXPECT_EQ(v, w2_input);
}

// Every exported parameter's bytes, by name.
std::map<std::string, std::vector<std::byte>> exported_bytes(const Plan& plan, const RankWeights& w) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const PlanParam& p : plan.ranks[static_cast<size_t>(w.rank)].params) {
    if (!p.exported()) continue;
    const std::byte* at = w.buffer.data() + p.offset;
    out[p.name].assign(at, at + p.nbytes);
  }
  return out;
}

std::vector<bool> modules_matching(const Plan& plan, const std::string& needle) {
  std::vector<bool> out(plan.modules.size());
  for (size_t m = 0; m < plan.modules.size(); ++m) out[m] = plan.modules[m].name.find(needle) != std::string::npos;
  return out;
}

class Fp8Reload : public ::testing::TestWithParam<std::string> {};

// Loading again into the same buffers gives the same bytes at the same addresses; a forced second pass of
// post-processing (what the engines' double processing does) changes them: the guard is what prevents it.
TEST_P(Fp8Reload, LoadingTwiceIsIdempotentAndAForcedSecondPassCorrupts) {
  TempDir dir;
  const std::string quant = GetParam();
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe", quant == "dynamic" ? "none" : quant, 7));
  const Plan plan = plan_of(ckpt, 2, 2, quant == "dynamic");
  std::vector<RankWeights> ranks = load_ranks(ckpt, plan);
  std::vector<const std::byte*> addresses;
  std::vector<std::vector<std::byte>> before;
  for (const RankWeights& w : ranks) {
    addresses.push_back(w.buffer.data());
    before.emplace_back(w.buffer.data(), w.buffer.data() + w.buffer.size());
  }
  load_into(ckpt, plan, ranks, {});
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].buffer.data(), addresses[r]);
    ASSERT_EQ(ranks[r].buffer.size(), before[r].size());
    EXPECT_EQ(std::memcmp(ranks[r].buffer.data(), before[r].data(), before[r].size()), 0) << "rank " << r;
  }
  // Negative control: run the qkv post-processing of layer 0 again on processed bytes.
  const std::vector<bool> qkv = modules_matching(plan, "layers.0.self_attn.qkv_proj");
  std::vector<uint32_t> list;
  for (uint32_t m = 0; m < qkv.size(); ++m) {
    if (qkv[m]) list.push_back(m);
  }
  ASSERT_EQ(list.size(), 1u);
  postprocess_modules(plan, ranks[0], list);  // already processed: a no-op
  EXPECT_EQ(std::memcmp(ranks[0].buffer.data(), before[0].data(), before[0].size()), 0);
  postprocess_modules(plan, ranks[0], list, PostprocessMode::kForceAgain);
  const bool changed = std::memcmp(ranks[0].buffer.data(), before[0].data(), before[0].size()) != 0;
  if (quant == "fp8" || quant == "ct-fp8-tensor") {
    EXPECT_TRUE(changed) << "a second requantization must corrupt the codes: the test could not fail otherwise";
  } else {
    // Dynamic quantization re-reads its float32 source, and channel and block scales are never
    // requantized, so a second pass is harmless by construction.
    EXPECT_FALSE(changed);
  }
}

// Experts from a second checkpoint (other values and scales): the experts equal a fresh load of it, every
// other module keeps its bytes (no second requantization of attention, no rewritten dense layers).
TEST_P(Fp8Reload, ExpertsOnlyFromAnotherCheckpointLeaveTheRestByteIdentical) {
  TempDir dir;
  const std::string quant = GetParam();
  const std::string stored = quant == "dynamic" ? "none" : quant;
  const Checkpoint first = Checkpoint::open(make_model(dir, "qwen3_moe", stored, 7));
  const Checkpoint second = Checkpoint::open(make_model(dir, "qwen3_moe", stored, 8));
  const bool dynamic = quant == "dynamic";
  const Plan plan_a = plan_of(first, 2, 2, dynamic);
  const Plan plan_b = plan_of(second, 2, 2, dynamic);
  std::vector<RankWeights> ranks = load_ranks(first, plan_a);
  const std::vector<RankWeights> fresh_b = load_ranks(second, plan_b);
  std::vector<std::map<std::string, std::vector<std::byte>>> before;
  for (const RankWeights& w : ranks) before.push_back(exported_bytes(plan_a, w));

  load_into(second, plan_b, ranks, modules_matching(plan_b, ".experts."));
  size_t experts = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto now = exported_bytes(plan_b, ranks[r]);
    const auto want_b = exported_bytes(plan_b, fresh_b[r]);
    for (const auto& [name, bytes] : now) {
      if (name.find(".experts.") != std::string::npos) {
        ++experts;
        EXPECT_EQ(bytes, want_b.at(name)) << name;
        // Symmetric GPTQ's zero points are one constant in every checkpoint.
        if (!name.ends_with("_qzeros")) EXPECT_NE(bytes, before[r].at(name)) << name << " should have changed";
      } else {
        EXPECT_EQ(bytes, before[r].at(name)) << name << " must not change";
      }
    }
  }
  EXPECT_GT(experts, 0u);
}

INSTANTIATE_TEST_SUITE_P(Quantizations, Fp8Reload,
                         ::testing::Values("fp8", "fp8-block", "dynamic", "ct-fp8-tensor", "ct-fp8-channel",
                                           "ct-fp8-block", "ct-w8a8", "ct-nvfp4", "gptq"));

TEST(Fp8DynamicTest, EachRankTensorAndExpertGetsItsOwnScaleCodeExact) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe", "none", 9));
  const Plan plan = plan_of(ckpt, 1, 1, true);
  ASSERT_EQ(plan.quantization, Quantization::kFp8Dynamic);
  const std::vector<RankWeights> ranks = load_ranks(ckpt, plan);
  const RankPlan& rank = plan.ranks[0];
  auto bf16_values = [&](const std::string& name) {
    const std::vector<std::byte> raw = read_tensor(ckpt, name);
    std::vector<double> out(raw.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t bits = 0;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      uint32_t f = uint32_t(bits) << 16;
      float v = 0;
      std::memcpy(&v, &f, 4);
      out[i] = v;
    }
    return out;
  };
  auto check = [&](const uint8_t* got, const std::vector<std::string>& parts, float scale) {
    std::vector<double> all;
    for (const std::string& p : parts) {
      const std::vector<double> v = bf16_values(p);
      all.insert(all.end(), v.begin(), v.end());
    }
    double amax = 0;
    for (double v : all) amax = std::max(amax, std::fabs(v));
    EXPECT_FLOAT_EQ(scale, float(std::max(amax, 1e-12) / 448.0));
    for (size_t i = 0; i < all.size(); ++i) {
      expect_within_one_code(got[i], fp8_reference(all[i] / double(scale)), parts[0] + " " + std::to_string(i));
    }
  };
  const std::string a = "model.layers.0.self_attn.";
  const PlanParam& qkv = param(rank, a + "qkv_proj.weight");
  EXPECT_EQ(qkv.dtype, DType::kF8E4M3);
  check(codes(ranks[0], qkv), {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
        floats(ranks[0], param(rank, a + "qkv_proj.weight_scale"))[0]);
  const std::string e = "model.layers.1.mlp.experts.";
  const PlanParam& w2 = param(rank, e + "w2_weight");
  const std::vector<float> w2_scales = floats(ranks[0], param(rank, e + "w2_weight_scale"));
  const std::vector<float> w13_scales = floats(ranks[0], param(rank, e + "w13_weight_scale"));
  const PlanParam& w13 = param(rank, e + "w13_weight");
  for (uint64_t x = 0; x < w2.shape[0]; ++x) {
    const std::string ex = e + std::to_string(x) + ".";
    check(codes(ranks[0], w2) + x * (w2.nbytes / w2.shape[0]), {ex + "down_proj.weight"}, w2_scales[x]);
    EXPECT_EQ(w13_scales[2 * x], w13_scales[2 * x + 1]);
    check(codes(ranks[0], w13) + x * (w13.nbytes / w13.shape[0]), {ex + "gate_proj.weight", ex + "up_proj.weight"},
          w13_scales[2 * x]);
  }
  // Not quantized: embeddings, norms, routers.
  EXPECT_EQ(param(rank, "model.embed_tokens.weight").dtype, DType::kBF16);
  EXPECT_EQ(param(rank, "model.layers.1.mlp.gate.weight").dtype, DType::kBF16);
  EXPECT_EQ(param(rank, a + "q_norm.weight").dtype, DType::kF32);
}

using ::shardload::testing::poke_float;

// The Error a load of `model` under tp/ep throws (a failure when it loads).
Error load_error(const std::string& model, int tp, int ep) {
  const Checkpoint ckpt = Checkpoint::open(model);
  try {
    load_ranks(ckpt, plan_of(ckpt, tp, ep));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << model << " loaded";
  return Error(ErrorKind::kIo, "no error");
}

// Block FP8 scales are checked as per-tensor ones are: a NaN, zero or negative weight_scale_inv
// block fails the load, naming the file, the checkpoint tensor, the block and the expert.
TEST(Fp8ScaleErrors, BadBlockScaleFailsTheLoad) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "fp8-block", 3);
  // up_proj [512, 256]: a [4, 2] grid, block (row 3, column 1) is element 7; at tp 4 / ep 2 its
  // rows 256-511 are on the second rank of EP rank 1, whose slot 0 holds expert 2.
  const std::string name = "model.layers.1.mlp.experts.2.up_proj.weight_scale_inv";
  for (const float bad : {std::nanf(""), 0.0f, -2.0f, -std::numeric_limits<float>::infinity()}) {
    const std::string file = poke_float(model, name, 7, bad);
    const Error e = load_error(model, 4, 2);
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << message;
    EXPECT_EQ(e.file(), file) << message;
    EXPECT_EQ(e.tensor(), name) << message;
    EXPECT_NE(message.find("block (row 3, column 1)"), std::string::npos) << message;
    EXPECT_NE(message.find("expert 2 "), std::string::npos) << message;
    EXPECT_NE(message.find("positive and finite"), std::string::npos) << message;
  }
  poke_float(model, name, 7, 0.25f);
  EXPECT_NO_THROW(load_ranks(Checkpoint::open(model), plan_of(Checkpoint::open(model), 4, 2)));
  // A dense layer's grid: o_proj [256, 512] has [2, 4] blocks; element 6 is block (row 1, column
  // 2).
  const std::string o_proj = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  poke_float(model, o_proj, 6, 0.0f);
  const Error e = load_error(model, 2, 1);
  EXPECT_EQ(e.tensor(), o_proj) << e.what();
  EXPECT_NE(std::string(e.what()).find("block (row 1, column 2)"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("expert"), std::string::npos) << e.what();
}

// The export command loads before it writes: a bad block scale exits 1 with the same error, and
// writes nothing.
TEST(Fp8ScaleErrors, BadBlockScaleFailsTheExport) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "fp8-block", 4);
  const std::string name = "model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv";
  poke_float(model, name, 0, std::nanf(""));
  const std::string out = dir.file("export");
  const ::shardload::testing::CommandResult result = ::shardload::testing::run_command(
      {testing::shardload_bin(), "export", model, "--out", out, "--tp", "2", "--ep", "2"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(result.err.find(name), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("block (row 0, column 0)"), std::string::npos) << result.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Per-tensor scales: the error names the checkpoint tensor, its file and the expert, not the
// internal [slots, parts] table the scales are gathered in.
TEST(Fp8ScaleErrors, BadPerTensorScaleNamesTheCheckpointTensorAndExpert) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "fp8", 5);
  // tp 2 / ep 2: expert 3 sits in slot 3 of rank 0.
  const std::string weight = "model.layers.1.mlp.experts.3.up_proj.weight_scale";
  std::string file = poke_float(model, weight, 0, 0.0f);
  Error e = load_error(model, 2, 2);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
  EXPECT_EQ(e.file(), file) << e.what();
  EXPECT_EQ(e.tensor(), weight) << e.what();
  EXPECT_NE(std::string(e.what()).find("expert 3 (slot 3 of rank 0)"), std::string::npos)
      << e.what();
  EXPECT_EQ(std::string(e.what()).find("_parts"), std::string::npos) << e.what();
  poke_float(model, weight, 0, 0.5f);

  const std::string input = "model.layers.3.mlp.experts.6.gate_proj.input_scale";
  file = poke_float(model, input, 0, std::nanf(""));
  e = load_error(model, 2, 2);
  EXPECT_EQ(e.file(), file) << e.what();
  EXPECT_EQ(e.tensor(), input) << e.what();
  EXPECT_NE(std::string(e.what()).find("expert 6 (slot 2 of rank 1)"), std::string::npos)
      << e.what();
  EXPECT_EQ(std::string(e.what()).find("_parts"), std::string::npos) << e.what();
  poke_float(model, input, 0, 0.5f);

  // A dense layer names its tensor, and no expert.
  const std::string k_proj = "model.layers.0.self_attn.k_proj.weight_scale";
  file = poke_float(model, k_proj, 0, -1.0f);
  e = load_error(model, 2, 2);
  EXPECT_EQ(e.file(), file) << e.what();
  EXPECT_EQ(e.tensor(), k_proj) << e.what();
  EXPECT_EQ(std::string(e.what()).find("expert"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace shardload
