// FP8 exports against docs/layout.md ("FP8") and fp8.md, derived here from the checkpoint
// alone (no planner code): static per-tensor (fused qkv and expert w13 requantized to the largest
// part scale, merged weight and input scales), block FP8 (weights and scale grids cut together,
// fused parts stacked, partial edge blocks), dynamic FP8 (per rank tensor and per expert). Codes
// within one of a float64 reference; scales exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "export_reader.h"
#include "fp8_reference.h"
#include "shard_test_util.h"
#include "shardload/checkpoint.h"

namespace shardload::testing {
namespace {

struct Fp8Case {
  std::string arch;
  std::string quant;  // fp8, fp8-block, dynamic (make-tiny none + --quantization fp8)
  int tp;
  int ep;
  int redundant;
};

void PrintTo(const Fp8Case& c, std::ostream* os) {
  *os << c.arch << " " << c.quant << " tp " << c.tp << " ep " << c.ep << " redundant "
      << c.redundant;
}

std::string fp8_case_name(const ::testing::TestParamInfo<Fp8Case>& info) {
  const Fp8Case& c = info.param;
  std::string quant = c.quant;
  std::replace(quant.begin(), quant.end(), '-', '_');
  return fmt::format("{}_{}_tp{}_ep{}_r{}", c.arch, quant, c.tp, c.ep, c.redundant);
}

// A checkpoint tensor as a [rows, cols] matrix.
struct Matrix {
  DType dtype;
  uint64_t rows, cols;
  std::vector<std::byte> bytes;
  size_t esize() const { return dtype_bits(dtype) / 8; }
  // Rows [r0, r1) x columns [c0, c1), densely.
  std::vector<std::byte> block(uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) const {
    std::vector<std::byte> out;
    for (uint64_t r = r0; r < r1; ++r) {
      const std::byte* row = bytes.data() + (r * cols + c0) * esize();
      out.insert(out.end(), row, row + (c1 - c0) * esize());
    }
    return out;
  }
  std::vector<std::byte> all() const { return bytes; }
};

class Source {
 public:
  explicit Source(const std::string& dir) : ckpt_(Checkpoint::open(dir)) {}
  Matrix operator()(const std::string& name) const {
    const Checkpoint::Entry* entry = ckpt_.find(name);
    if (entry == nullptr) throw std::runtime_error("checkpoint has no " + name);
    const TensorInfo& info = *entry->info;
    Matrix m{info.dtype, info.shape.empty() ? 1 : info.shape[0],
             info.shape.size() <= 1 ? 1 : info.shape[1], std::vector<std::byte>(info.nbytes())};
    ckpt_.files()[entry->file].read(info, m.bytes);
    return m;
  }
  float scalar(const std::string& name) const {
    float v = 0;
    std::memcpy(&v, (*this)(name).bytes.data(), sizeof v);
    return v;
  }

 private:
  Checkpoint ckpt_;
};

std::vector<float> floats_of(const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<double> values_of(const std::vector<std::byte>& bf16) {
  std::vector<double> out(bf16.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(reinterpret_cast<char*>(&bits) + 2, bf16.data() + 2 * i, 2);
    float v = 0;
    std::memcpy(&v, &bits, 4);
    out[i] = v;
  }
  return out;
}

// Codes of checkpoint part `codes` (at scale s) brought to scale m, in float64.
std::vector<uint8_t> requantized(const std::vector<std::byte>& codes, double s, double m) {
  std::vector<uint8_t> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i)
    out[i] = fp8_reference(fp8_value(uint8_t(codes[i])) * s / m);
  return out;
}

class Checker {
 public:
  Checker(const std::map<std::string, HostTensor>& rank, int r) : rank_(rank), r_(r) {}
  const HostTensor& get(const std::string& name) {
    const auto it = rank_.find(name);
    if (it == rank_.end()) throw std::runtime_error(fmt::format("rank {} has no {}", r_, name));
    return it->second;
  }
  void codes(const std::string& name, const std::vector<uint8_t>& want) {
    const HostTensor& t = get(name);
    ASSERT_EQ(t.dtype, DType::kF8E4M3) << name;
    ASSERT_EQ(t.bytes.size(), want.size()) << "rank " << r_ << " " << name;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(within_one_code(uint8_t(t.bytes[i]), want[i]))
          << "rank " << r_ << " " << name << " element " << i << ": " << int(uint8_t(t.bytes[i]))
          << " vs " << int(want[i]);
    }
  }
  void scales(const std::string& name, const Shape& shape, const std::vector<float>& want) {
    const HostTensor& t = get(name);
    EXPECT_EQ(t.dtype, DType::kF32) << name;
    EXPECT_EQ(t.shape, shape) << "rank " << r_ << " " << name;
    EXPECT_EQ(floats_of(t.bytes), want) << "rank " << r_ << " " << name;
  }
  void bytes(const std::string& name, const std::vector<std::byte>& want) {
    EXPECT_TRUE(get(name).bytes == want) << "rank " << r_ << " " << name;
  }

 private:
  const std::map<std::string, HostTensor>& rank_;
  int r_;
};

class Fp8Export : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Export, MatchesLayoutMd) {
  const Fp8Case& c = GetParam();
  TempDir tmp;
  const std::string model = tmp.file("model");
  make_tiny({.arch = c.arch,
             .out = model,
             .seed = test_seed(),
             .quant = c.quant == "dynamic" ? "none" : c.quant});
  const std::string out = tmp.file("export");
  std::vector<std::string> args = {"export",
                                   model,
                                   "--tp",
                                   std::to_string(c.tp),
                                   "--ep",
                                   std::to_string(c.ep),
                                   "--redundant-experts",
                                   std::to_string(c.redundant),
                                   "--out",
                                   out};
  if (c.quant == "dynamic") args.insert(args.end(), {"--quantization", "fp8"});
  const CommandResult result = shardload_cli(args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  Problems problems;
  const ExportContents ex = read_export(out, problems);
  ASSERT_TRUE(problems.empty()) << problems.text();
  EXPECT_EQ(ex.manifest.value("quantization", ""), c.quant == "dynamic" ? "fp8-dynamic" : c.quant);
  const Source src(model);
  const nlohmann::json& cfg = ex.config;
  const std::vector<int> map =
      ex.manifest.at("physical_to_logical_map").at(0).get<std::vector<int>>();
  const uint64_t tp = uint64_t(c.tp);
  const uint64_t moe_tp = tp / uint64_t(c.ep);
  const uint64_t local = map.size() / uint64_t(c.ep);
  const std::string moe = "model.layers.1.mlp.";  // layer 1 has experts in both families

  for (uint64_t r = 0; r < tp; ++r) {
    Checker check(ex.ranks[r], int(r));
    const uint64_t e = r / moe_tp;
    const uint64_t rm = r % moe_tp;
    if (c.quant == "fp8") {
      // Fused qkv of layer 0 (GQA: kv heads in blocks, or one per rank when tp outnumbers them).
      const std::string a = "model.layers.0.self_attn.";
      const uint64_t d = cfg.at("head_dim");
      const uint64_t kv_heads = cfg.at("num_key_value_heads");
      const Matrix q = src(a + "q_proj.weight"), k = src(a + "k_proj.weight"),
                   v = src(a + "v_proj.weight");
      const float sq = src.scalar(a + "q_proj.weight_scale"),
                  sk = src.scalar(a + "k_proj.weight_scale"),
                  sv = src.scalar(a + "v_proj.weight_scale");
      const float m = std::max({sq, sk, sv});
      const uint64_t qr = q.rows / tp;
      uint64_t k0 = 0, k1 = 0;
      if (tp >= kv_heads) {
        const uint64_t head = r / (tp / kv_heads);
        k0 = head * d;
        k1 = k0 + d;
      } else {
        k0 = r * kv_heads / tp * d;
        k1 = k0 + kv_heads / tp * d;
      }
      std::vector<uint8_t> want = requantized(q.block(r * qr, (r + 1) * qr, 0, q.cols), sq, m);
      for (const auto& [part, s] : {std::pair{&k, sk}, std::pair{&v, sv}}) {
        const std::vector<uint8_t> p = requantized(part->block(k0, k1, 0, part->cols), s, m);
        want.insert(want.end(), p.begin(), p.end());
      }
      check.codes(a + "qkv_proj.weight", want);
      check.scales(a + "qkv_proj.weight_scale", {1}, {m});
      check.scales(
          a + "qkv_proj.input_scale", {1},
          {std::max({src.scalar(a + "q_proj.input_scale"), src.scalar(a + "k_proj.input_scale"),
                     src.scalar(a + "v_proj.input_scale")})});
      // Experts of layer 1: per slot, gate/up to max(gate, up); w2 unchanged; input scales are rank
      // maxima.
      std::vector<uint8_t> w13;
      std::vector<std::byte> w2;
      std::vector<float> s13, s2;
      float in13 = 0, in2 = 0;
      for (uint64_t j = 0; j < local; ++j) {
        const std::string x = fmt::format("{}experts.{}.", moe, map[e * local + j]);
        const Matrix g = src(x + "gate_proj.weight"), u = src(x + "up_proj.weight"),
                     dn = src(x + "down_proj.weight");
        const float sg = src.scalar(x + "gate_proj.weight_scale"),
                    su = src.scalar(x + "up_proj.weight_scale");
        const float mm = std::max(sg, su);
        const uint64_t i = g.rows / moe_tp;
        for (const auto& [part, s] : {std::pair{&g, sg}, std::pair{&u, su}}) {
          const std::vector<uint8_t> p =
              requantized(part->block(rm * i, (rm + 1) * i, 0, part->cols), s, mm);
          w13.insert(w13.end(), p.begin(), p.end());
        }
        const std::vector<std::byte> down = dn.block(0, dn.rows, rm * i, (rm + 1) * i);
        w2.insert(w2.end(), down.begin(), down.end());
        s13.insert(s13.end(), {mm, mm});
        s2.push_back(src.scalar(x + "down_proj.weight_scale"));
        in13 = std::max(
            {in13, src.scalar(x + "gate_proj.input_scale"), src.scalar(x + "up_proj.input_scale")});
        in2 = std::max(in2, src.scalar(x + "down_proj.input_scale"));
      }
      check.codes(moe + "experts.w13_weight", w13);
      check.bytes(moe + "experts.w2_weight", w2);
      check.scales(moe + "experts.w13_weight_scale", {local, 2}, s13);
      check.scales(moe + "experts.w2_weight_scale", {local}, s2);
      check.scales(moe + "experts.w13_input_scale", {local}, std::vector<float>(local, in13));
      check.scales(moe + "experts.w2_input_scale", {local}, std::vector<float>(local, in2));
    } else if (c.quant == "fp8-block") {
      const std::string a = "model.layers.1.self_attn.";
      // Column cut (q_b_proj), row cut (o_proj): weights and scale grids together.
      const Matrix qb = src(a + "q_b_proj.weight"), qbs = src(a + "q_b_proj.weight_scale_inv");
      const uint64_t rows = qb.rows / tp;
      check.bytes(a + "q_b_proj.weight", qb.block(r * rows, (r + 1) * rows, 0, qb.cols));
      check.bytes(a + "q_b_proj.weight_scale_inv",
                  qbs.block(r * rows / 128, (r + 1) * rows / 128, 0, qbs.cols));
      const Matrix o = src(a + "o_proj.weight"), os = src(a + "o_proj.weight_scale_inv");
      const uint64_t cols = o.cols / tp;
      check.bytes(a + "o_proj.weight", o.block(0, o.rows, r * cols, (r + 1) * cols));
      check.bytes(a + "o_proj.weight_scale_inv",
                  os.block(0, os.rows, r * cols / 128, (r + 1) * cols / 128));
      // Replicated fused q_a + kv_a: per-part grids stacked, kv_a's partial edge block kept.
      std::vector<std::byte> grid = src(a + "q_a_proj.weight_scale_inv").all();
      const std::vector<std::byte> kv = src(a + "kv_a_proj_with_mqa.weight_scale_inv").all();
      grid.insert(grid.end(), kv.begin(), kv.end());
      check.bytes(a + "fused_qkv_a_proj.weight_scale_inv", grid);
      std::vector<std::byte> w13, w13s, w2, w2s;
      for (uint64_t j = 0; j < local; ++j) {
        const std::string x = fmt::format("{}experts.{}.", moe, map[e * local + j]);
        for (const char* part : {"gate_proj", "up_proj"}) {
          const Matrix w = src(x + part + ".weight"), s = src(x + part + ".weight_scale_inv");
          const uint64_t i = w.rows / moe_tp;
          const std::vector<std::byte> wb = w.block(rm * i, (rm + 1) * i, 0, w.cols);
          const std::vector<std::byte> sb = s.block(rm * i / 128, (rm + 1) * i / 128, 0, s.cols);
          w13.insert(w13.end(), wb.begin(), wb.end());
          w13s.insert(w13s.end(), sb.begin(), sb.end());
        }
        const Matrix w = src(x + "down_proj.weight"), s = src(x + "down_proj.weight_scale_inv");
        const uint64_t i = w.cols / moe_tp;
        const std::vector<std::byte> wb = w.block(0, w.rows, rm * i, (rm + 1) * i);
        const std::vector<std::byte> sb = s.block(0, s.rows, rm * i / 128, (rm + 1) * i / 128);
        w2.insert(w2.end(), wb.begin(), wb.end());
        w2s.insert(w2s.end(), sb.begin(), sb.end());
      }
      check.bytes(moe + "experts.w13_weight", w13);
      check.bytes(moe + "experts.w13_weight_scale_inv", w13s);
      check.bytes(moe + "experts.w2_weight", w2);
      check.bytes(moe + "experts.w2_weight_scale_inv", w2s);
    } else {  // dynamic: s = max(amax, 1e-12) / 448 per rank tensor and per expert, from the
              // checkpoint values
      auto quantized = [](const std::vector<double>& v, float s) {
        std::vector<uint8_t> out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = fp8_reference(v[i] / double(s));
        return out;
      };
      auto scale_of = [](const std::vector<double>& v) {
        double amax = 0;
        for (double x : v) amax = std::max(amax, std::fabs(x));
        return float(std::max(amax, 1e-12) / 448.0);
      };
      const std::string a = "model.layers.0.self_attn.";
      const Matrix o = src(a + "o_proj.weight");
      const uint64_t cols = o.cols / tp;
      const std::vector<double> ov = values_of(o.block(0, o.rows, r * cols, (r + 1) * cols));
      const float os = scale_of(ov);
      check.scales(a + "o_proj.weight_scale", {1}, {os});
      check.codes(a + "o_proj.weight", quantized(ov, os));
      EXPECT_EQ(ex.ranks[r].count(a + "o_proj.input_scale"), 0u)
          << "dynamic activations: no input_scale";
      std::vector<uint8_t> w2;
      std::vector<float> s2;
      for (uint64_t j = 0; j < local; ++j) {
        const Matrix dn =
            src(fmt::format("{}experts.{}.down_proj.weight", moe, map[e * local + j]));
        const uint64_t i = dn.cols / moe_tp;
        const std::vector<double> v = values_of(dn.block(0, dn.rows, rm * i, (rm + 1) * i));
        s2.push_back(scale_of(v));
        const std::vector<uint8_t> q = quantized(v, s2.back());
        w2.insert(w2.end(), q.begin(), q.end());
      }
      check.scales(moe + "experts.w2_weight_scale", {local}, s2);
      check.codes(moe + "experts.w2_weight", w2);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Fp8Export,
    ::testing::Values(
        Fp8Case{"qwen3_moe", "fp8", 1, 1, 0}, Fp8Case{"qwen3_moe", "fp8", 2, 2, 2},
        Fp8Case{"qwen3_moe", "fp8", 4, 2, 2}, Fp8Case{"qwen3_moe", "fp8", 4, 1, 2},
        Fp8Case{"qwen3_moe", "fp8", 4, 4, 0}, Fp8Case{"deepseek_v3", "fp8-block", 1, 1, 0},
        Fp8Case{"deepseek_v3", "fp8-block", 2, 1, 0}, Fp8Case{"deepseek_v3", "fp8-block", 4, 2, 0},
        Fp8Case{"deepseek_v3", "fp8-block", 4, 4, 0}, Fp8Case{"qwen3_moe", "dynamic", 2, 2, 2},
        Fp8Case{"qwen3_moe", "dynamic", 4, 2, 0}, Fp8Case{"glm4_moe", "fp8", 4, 2, 2}),
    fp8_case_name);

}  // namespace
}  // namespace shardload::testing
