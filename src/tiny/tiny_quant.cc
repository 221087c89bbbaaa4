// FP8 checkpoints: which tensors are FP8, their scale tensors, and their values, derived from the
// bf16 values the generator would otherwise write, so that tests can dequantize and compare.

#include "tiny/tiny_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "core/parallel_for.h"
#include "shardload/convert.h"
#include "shardload/error.h"
#include "shardload/fp8_quant.h"

namespace shardload::tiny {

namespace {

// Keeps the streams of the scale factors and input scales apart from each other and from the
// tensor values, which hash the same names.
constexpr uint64_t kFactorSalt = 0x5CA1E5F8A1B2C3D4ull;
constexpr uint64_t kInputSalt = 0x1A9E7F0C4D3B2A19ull;
constexpr unsigned kMaxThreads = 16;

// A uniform float in [0, 1) with 22 random bits.
float uniform(uint64_t seed, std::string_view name, uint64_t salt, uint64_t index) {
  uint64_t state = stream_start(seed ^ fnv1a(name) ^ salt, index);
  return static_cast<float>(splitmix64(state) >> 42) * 0x1p-22f;
}

// Where a projection sits in the layer that loaders fuse it into (qkv, gate_up, fused_qkv_a, an
// expert's w13): the fused layer's name, this part's index, and the number of parts.
struct FusedPart {
  std::string_view layer;
  int index = 0;
  int parts = 1;
};

FusedPart fused_part(std::string_view module) {
  struct Role {
    std::string_view name;
    int index, parts;
  };
  static constexpr Role kRoles[] = {
      {"q_proj", 0, 3},    {"k_proj", 1, 3},   {"v_proj", 2, 3},
      {"gate_proj", 0, 2}, {"up_proj", 1, 2},  {"w1", 0, 2},
      {"w3", 1, 2},        {"q_a_proj", 0, 2}, {"kv_a_proj_with_mqa", 1, 2},
  };
  const size_t dot = module.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? module : module.substr(dot + 1);
  for (const Role& role : kRoles) {
    if (last == role.name) return {module.substr(0, dot + 1), role.index, role.parts};
  }
  return {module, 0, 1};
}

// The factor f in [1, 4) of a block (0 for a per-tensor scale): drawn per fused layer and block,
// then spread so that the parts of a fused layer are at least 3/parts apart (modulo 3). Their
// scales then differ clearly (a ratio of about 4/3 at least), so requantizing to the largest
// matters, and which part is the largest changes from layer to layer.
float scale_factor(uint64_t seed, std::string_view module, uint64_t block) {
  const FusedPart part = fused_part(module);
  double position = uniform(seed, part.layer, kFactorSalt, block) +
                    static_cast<double>(part.index) / static_cast<double>(part.parts);
  if (position >= 1.0) position -= 1.0;
  return std::min(static_cast<float>(1.0 + 3.0 * position), std::nextafter(4.0f, 0.0f));
}

// The part of `name` before `suffix`, or nullopt when it does not end so.
std::optional<std::string_view> strip(std::string_view name, std::string_view suffix) {
  if (!name.ends_with(suffix)) return std::nullopt;
  return name.substr(0, name.size() - suffix.size());
}

// The module a quantized tensor belongs to: "<m>" of <m>.weight, .weight_scale(_inv), .input_scale,
// .weight_packed, .weight_zero_point, .weight_shape, ModelOpt's .weight_scale_2.
std::string_view module_of(const TensorSpec& spec) {
  for (std::string_view suffix : {".weight", ".weight_scale", ".weight_scale_inv", ".input_scale", ".weight_packed",
                                  ".weight_zero_point", ".weight_shape", ".weight_global_scale",
                                  ".input_global_scale", ".qweight", ".scales", ".qzeros", ".g_idx",
                                  ".weight_scale_2"}) {
    if (auto module = strip(spec.name, suffix)) return *module;
  }
  throw Error(ErrorKind::kInvalidArgument, "not an FP8 weight or scale name",
              {.tensor = spec.name});
}

// How a weight [rows, cols] is cut into blocks that share a scale.
struct Grid {
  uint64_t rows = 0, cols = 0;              // the weight
  uint64_t block_rows = 0, block_cols = 0;  // rows and columns of one block
  uint64_t grid_rows = 0, grid_cols = 0;    // blocks down and across
};

Grid grid_of(const std::string& weight, const Shape& shape, Quant quant) {
  if (shape.size() != 2 || shape[0] == 0 || shape[1] == 0) {
    throw Error(ErrorKind::kInvalidArgument, "an FP8 weight must be a non-empty matrix",
                {.tensor = weight});
  }
  Grid g{.rows = shape[0], .cols = shape[1]};
  g.block_rows = is_block_quant(quant) ? kFp8Block : quant == Quant::kCtChannel ? 1 : g.rows;
  g.block_cols = is_block_quant(quant) ? kFp8Block : g.cols;
  g.grid_rows = (g.rows + g.block_rows - 1) / g.block_rows;
  g.grid_cols = (g.cols + g.block_cols - 1) / g.block_cols;
  return g;
}

// The float32 values of the weight in its bf16 form: exactly what --quant none writes.
std::vector<float> reference_values(const std::string& weight, const Shape& shape, uint64_t seed) {
  const TensorSpec spec{weight, DType::kBF16, shape, ValueKind::kWeight};
  const uint64_t numel = shape_numel(shape);
  std::vector<std::byte> bf16(numel * 2);
  const FillJob job{&spec, bf16};
  fill_values({&job, 1}, seed, 1);
  std::vector<float> values(numel);
  convert(DType::kBF16, bf16.data(), DType::kF32, values.data(), numel);
  return values;
}

// One scale per block, row-major over the grid: amax / kFp8E4m3Max times the block's factor (in
// the scales' stored dtype, so that codes and scales dequantize to what was meant).
std::vector<float> block_scales(const std::vector<float>& w, const Grid& g, uint64_t seed,
                                std::string_view module, DType stored) {
  std::vector<float> amax(g.grid_rows * g.grid_cols, 0.0f);
  for (uint64_t r = 0; r < g.rows; ++r) {
    float* row_amax = amax.data() + (r / g.block_rows) * g.grid_cols;
    const float* row = w.data() + r * g.cols;
    for (uint64_t c = 0; c < g.cols; ++c) {
      float& a = row_amax[c / g.block_cols];
      a = std::max(a, std::fabs(row[c]));
    }
  }
  for (uint64_t b = 0; b < amax.size(); ++b) {
    // An all-zero block would give 0/0; the dynamic quantizer uses the same floor.
    amax[b] = std::max(amax[b], kFp8AmaxFloor) / kFp8E4m3Max * scale_factor(seed, module, b);
  }
  if (stored != DType::kF32) {
    std::vector<std::byte> rounded(amax.size() * dtype_bits(stored) / 8);
    convert(DType::kF32, amax.data(), stored, rounded.data(), amax.size());
    convert(stored, rounded.data(), DType::kF32, amax.data(), amax.size());
  }
  return amax;
}

void write_codes(const std::vector<float>& w, const std::vector<float>& scales, const Grid& g,
                 std::span<std::byte> out) {
  for (uint64_t r = 0; r < g.rows; ++r) {
    const float* row_scales = scales.data() + (r / g.block_rows) * g.grid_cols;
    for (uint64_t c = 0; c < g.cols; ++c) {
      const uint64_t i = r * g.cols + c;
      out[i] = static_cast<std::byte>(f32_to_fp8e4m3(w[i] / row_scales[c / g.block_cols]));
    }
  }
}

// Scales in their stored dtype: F32, or the model's BF16 as llm-compressor writes them.
void write_floats(const std::vector<float>& values, DType dtype, std::span<std::byte> out) {
  if (out.size() != values.size() * dtype_bits(dtype) / 8) {
    throw Error(ErrorKind::kInvalidArgument, "scale tensor size does not match its weight's grid");
  }
  convert(DType::kF32, values.data(), dtype, out.data(), values.size());
}

// The tensors of one module in this call; any may be absent (in another shard).
struct Group {
  const FillJob* weight = nullptr;
  const FillJob* scale = nullptr;
  const FillJob* input = nullptr;
  const FillJob* zero = nullptr;
  const FillJob* shape = nullptr;
  const FillJob* global = nullptr;
  const FillJob* group_index = nullptr;
};

struct IntScheme {
  uint32_t bits = 4;
  uint64_t group = kTinyIntGroup;  // inputs per scale; 0: the whole row
  bool zero_points = false;
  uint64_t pack() const { return 32 / bits; }
};

IntScheme int_scheme(Quant quant) {
  if (quant == Quant::kCtW8a16 || quant == Quant::kCtW8a8) return {8, 0, false};
  return {4, kTinyIntGroup, quant == Quant::kCtW4a16Asym};
}

// Integer weights of one module: scales (BF16-rounded), zero points and signed codes per value.
struct IntCodes {
  std::vector<float> scales;    // [rows, groups]
  std::vector<int32_t> zeros;   // [rows, groups], 0 when symmetric
  std::vector<int32_t> codes;   // [rows, cols], in [-2^(bits-1), 2^(bits-1))
  uint64_t groups = 0;
};

IntCodes int_codes(const std::vector<float>& w, uint64_t rows, uint64_t cols, const IntScheme& q) {
  const uint64_t group = q.group == 0 ? cols : q.group;
  const int32_t qmin = -(1 << (q.bits - 1));
  const int32_t qmax = (1 << (q.bits - 1)) - 1;
  IntCodes out;
  out.groups = cols / group;
  out.scales.resize(rows * out.groups);
  out.zeros.assign(rows * out.groups, 0);
  out.codes.resize(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t g = 0; g < out.groups; ++g) {
      const float* v = w.data() + r * cols + g * group;
      float lo = 0, hi = 0, amax = 0;
      for (uint64_t i = 0; i < group; ++i) {
        lo = std::min(lo, v[i]);
        hi = std::max(hi, v[i]);
        amax = std::max(amax, std::fabs(v[i]));
      }
      float scale = q.zero_points ? (hi - lo) / static_cast<float>(qmax - qmin) : amax / static_cast<float>(qmax);
      scale = bf16_to_f32(f32_to_bf16(std::max(scale, 1e-6f)));
      const int32_t zero =
          q.zero_points ? std::clamp(static_cast<int32_t>(std::nearbyint(-lo / scale)) + qmin, qmin, qmax) : 0;
      out.scales[r * out.groups + g] = scale;
      out.zeros[r * out.groups + g] = zero;
      for (uint64_t i = 0; i < group; ++i) {
        const auto code = static_cast<int32_t>(std::nearbyint(v[i] / scale)) + zero;
        out.codes[r * cols + g * group + i] = std::clamp(code, qmin, qmax);
      }
    }
  }
  return out;
}

// Word c of a run of values holds values pack*c + j at bits bits*j, each offset by 2^(bits-1).
uint32_t pack_word(const int32_t* values, uint64_t stride, const IntScheme& q) {
  uint32_t word = 0;
  const uint32_t mask = (1u << q.bits) - 1;
  for (uint64_t j = 0; j < q.pack(); ++j) {
    const auto stored = static_cast<uint32_t>(values[j * stride] + (1 << (q.bits - 1))) & mask;
    word |= stored << (q.bits * j);
  }
  return word;
}

void fill_packed_int(const Group& group, uint64_t seed) {
  const TensorSpec& any = group.weight != nullptr ? *group.weight->spec
                          : group.scale != nullptr ? *group.scale->spec
                          : group.zero != nullptr  ? *group.zero->spec
                                                   : *group.shape->spec;
  const std::string_view module = module_of(any);
  const Shape& shape = any.weight_shape;  // every tensor of the module carries the weight's [out, in]
  const uint64_t rows = shape[0], cols = shape[1];
  if (group.shape != nullptr) {
    if (group.shape->spec->dtype == DType::kI32) {  // Kimi-K2.5's files
      const int32_t dims[2] = {static_cast<int32_t>(rows), static_cast<int32_t>(cols)};
      std::memcpy(group.shape->out.data(), dims, sizeof dims);
    } else {
      const int64_t dims[2] = {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
      std::memcpy(group.shape->out.data(), dims, sizeof dims);
    }
  }
  if (group.weight == nullptr && group.scale == nullptr && group.zero == nullptr) return;
  const IntScheme q = int_scheme(any.quant);
  const IntCodes codes = int_codes(reference_values(std::string(module) + ".weight", shape, seed), rows, cols, q);
  if (group.weight != nullptr && any.quant == Quant::kCtW8a8) {  // int8 as they are
    auto* bytes = reinterpret_cast<int8_t*>(group.weight->out.data());
    for (uint64_t i = 0; i < rows * cols; ++i) bytes[i] = static_cast<int8_t>(codes.codes[i]);
  } else if (group.weight != nullptr) {
    auto* words = reinterpret_cast<uint32_t*>(group.weight->out.data());
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols / q.pack(); ++c) {
        words[r * (cols / q.pack()) + c] = pack_word(codes.codes.data() + r * cols + c * q.pack(), 1, q);
      }
    }
  }
  if (group.scale != nullptr) write_floats(codes.scales, DType::kBF16, group.scale->out);
  if (group.zero != nullptr) {  // packed along the rows: [rows / pack, groups]
    auto* words = reinterpret_cast<uint32_t*>(group.zero->out.data());
    for (uint64_t r = 0; r < rows / q.pack(); ++r) {
      for (uint64_t g = 0; g < codes.groups; ++g) {
        words[r * codes.groups + g] = pack_word(codes.zeros.data() + r * q.pack() * codes.groups + g, codes.groups, q);
      }
    }
  }
}

// GPTQ int4, symmetric: in 32-value groups, or one group a column.
IntScheme gptq_scheme(Quant quant) { return {4, quant == Quant::kGptqChannel ? 0 : kTinyIntGroup, false}; }

// GPTQ (v1, symmetric): the W4A16 codes of the [out, in] weight, stored input-major.
void fill_gptq(const Group& group, uint64_t seed) {
  const TensorSpec& any = group.weight != nullptr ? *group.weight->spec
                          : group.scale != nullptr ? *group.scale->spec
                          : group.zero != nullptr  ? *group.zero->spec
                                                   : *group.group_index->spec;
  const Shape& shape = any.weight_shape;  // every tensor of the module carries the weight's [out, in]
  const uint64_t rows = shape[0], cols = shape[1];
  const IntScheme q = gptq_scheme(any.quant);
  const uint64_t group_size = q.group == 0 ? cols : q.group;
  const uint64_t groups = cols / group_size;
  if (group.group_index != nullptr) {
    auto* index = reinterpret_cast<int32_t*>(group.group_index->out.data());
    for (uint64_t i = 0; i < cols; ++i) index[i] = static_cast<int32_t>(i / group_size);
  }
  if (group.zero != nullptr) {  // zero - 1 in every field: 2^(bits-1) - 1
    uint32_t word = 0;
    for (uint64_t j = 0; j < q.pack(); ++j) word |= ((1u << (q.bits - 1)) - 1) << (q.bits * j);
    auto* words = reinterpret_cast<uint32_t*>(group.zero->out.data());
    std::fill(words, words + groups * rows / q.pack(), word);
  }
  if (group.weight == nullptr && group.scale == nullptr) return;
  const IntCodes codes =
      int_codes(reference_values(std::string(module_of(any)) + ".weight", shape, seed), rows, cols, q);
  if (group.weight != nullptr) {  // word (w, n): inputs 8w .. 8w + 7 of output n
    auto* words = reinterpret_cast<uint32_t*>(group.weight->out.data());
    for (uint64_t w = 0; w < cols / q.pack(); ++w) {
      for (uint64_t n = 0; n < rows; ++n) words[w * rows + n] = pack_word(codes.codes.data() + n * cols + w * q.pack(), 1, q);
    }
  }
  if (group.scale != nullptr) {  // [groups, out], F16 (the BF16-rounded scales are exact in it)
    std::vector<float> by_group(groups * rows);
    for (uint64_t n = 0; n < rows; ++n) {
      for (uint64_t g = 0; g < groups; ++g) by_group[g * rows + n] = codes.scales[n * groups + g];
    }
    write_floats(by_group, DType::kF16, group.scale->out);
  }
}

// AWQ (GEMM, zero points): the W4A16_ASYM codes of the [out, in] weight, input-major, words of 8 outputs in
// AWQ's order (nibble j of word c holds output 8c + kAwqOrder[j]).
constexpr uint64_t kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Word c of row `values` (a row of an input-major [.., out] table, signed codes) in AWQ's order, offset by 8.
uint32_t awq_word(const int32_t* values, uint64_t c) {
  uint32_t word = 0;
  for (uint64_t j = 0; j < 8; ++j) word |= (static_cast<uint32_t>(values[8 * c + kAwqOrder[j]] + 8) & 0xF) << (4 * j);
  return word;
}

void fill_awq(const Group& group, uint64_t seed) {
  const TensorSpec& any = group.weight != nullptr ? *group.weight->spec
                          : group.scale != nullptr ? *group.scale->spec
                                                   : *group.zero->spec;
  const Shape& shape = any.weight_shape;  // every tensor of the module carries the weight's [out, in]
  const uint64_t rows = shape[0], cols = shape[1];
  const IntScheme q = int_scheme(Quant::kCtW4a16Asym);
  const IntCodes codes =
      int_codes(reference_values(std::string(module_of(any)) + ".weight", shape, seed), rows, cols, q);
  const uint64_t groups = codes.groups;
  std::vector<int32_t> row(rows);
  if (group.weight != nullptr) {  // [in, out / 8]
    auto* words = reinterpret_cast<uint32_t*>(group.weight->out.data());
    for (uint64_t k = 0; k < cols; ++k) {
      for (uint64_t n = 0; n < rows; ++n) row[n] = codes.codes[n * cols + k];
      for (uint64_t c = 0; c < rows / 8; ++c) words[k * (rows / 8) + c] = awq_word(row.data(), c);
    }
  }
  if (group.zero != nullptr) {  // [groups, out / 8]
    auto* words = reinterpret_cast<uint32_t*>(group.zero->out.data());
    for (uint64_t g = 0; g < groups; ++g) {
      for (uint64_t n = 0; n < rows; ++n) row[n] = codes.zeros[n * groups + g];
      for (uint64_t c = 0; c < rows / 8; ++c) words[g * (rows / 8) + c] = awq_word(row.data(), c);
    }
  }
  if (group.scale != nullptr) {  // [groups, out], F16 (the BF16-rounded scales are exact in it)
    std::vector<float> by_group(groups * rows);
    for (uint64_t n = 0; n < rows; ++n) {
      for (uint64_t g = 0; g < groups; ++g) by_group[g * rows + n] = codes.scales[n * groups + g];
    }
    write_floats(by_group, DType::kF16, group.scale->out);
  }
}

// E2M1's magnitudes by code (bit 3 the sign).
constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr float kFp4Max = 6.0f;

// The E2M1 code nearest x (ties to the lower magnitude), saturating at +-6.
uint8_t e2m1_code(float x) {
  const float a = std::fabs(x);
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    if (std::fabs(kE2m1[c] - a) < std::fabs(kE2m1[best] - a)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) && best != 0 ? 8 : 0));
}

// ModelOpt stores the reciprocals of compressed-tensors' global scales (weight_scale_2 = amax / (6 * 448),
// input_scale likewise); the codes and group scales are the same.
void fill_nvfp4(const Group& group, uint64_t seed) {
  const TensorSpec& any = group.weight != nullptr ? *group.weight->spec
                          : group.scale != nullptr ? *group.scale->spec
                          : group.global != nullptr ? *group.global->spec
                                                    : *group.input->spec;
  const std::string_view module = module_of(any);
  const bool modelopt = any.quant == Quant::kModeloptNvfp4;
  if (group.input != nullptr) {
    const float value = 10.0f + 90.0f * uniform(seed, group.input->spec->name, kInputSalt, 0);
    write_floats({modelopt ? 1.0f / value : value}, DType::kF32, group.input->out);
  }
  if (group.weight == nullptr && group.scale == nullptr && group.global == nullptr) return;
  const Shape& shape = any.weight_shape;  // every tensor of the module carries the weight's [out, in]
  const uint64_t rows = shape[0], cols = shape[1], groups = cols / 16;
  const std::vector<float> w = reference_values(std::string(module) + ".weight", shape, seed);
  float amax = 0;
  for (const float v : w) amax = std::max(amax, std::fabs(v));
  // ModelOpt: the stored scale_2 is the exact value the codes are made with (global its reciprocal).
  const float scale_2 = std::max(amax, kFp8AmaxFloor) / (kFp8E4m3Max * kFp4Max);
  const float global = modelopt ? 1.0f / scale_2 : kFp8E4m3Max * kFp4Max / std::max(amax, kFp8AmaxFloor);
  if (group.global != nullptr) write_floats({modelopt ? scale_2 : global}, DType::kF32, group.global->out);
  if (group.weight == nullptr && group.scale == nullptr) return;
  std::vector<uint8_t> scale_codes(rows * groups);
  auto* bytes = group.weight != nullptr ? reinterpret_cast<uint8_t*>(group.weight->out.data()) : nullptr;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t g = 0; g < groups; ++g) {
      const float* v = w.data() + r * cols + g * 16;
      float group_amax = 0;
      for (int i = 0; i < 16; ++i) group_amax = std::max(group_amax, std::fabs(v[i]));
      const uint8_t code = f32_to_fp8e4m3(group_amax / kFp4Max * global);
      scale_codes[r * groups + g] = code;
      if (bytes == nullptr) continue;
      float scale = 0;
      convert(DType::kF8E4M3, &code, DType::kF32, &scale, 1);
      const float step = modelopt ? scale * scale_2 : scale / global;  // what one E2M1 unit is worth here
      for (int i = 0; i < 16; i += 2) {
        const uint8_t lo = step > 0 ? e2m1_code(v[i] / step) : 0;
        const uint8_t hi = step > 0 ? e2m1_code(v[i + 1] / step) : 0;
        bytes[(r * cols + g * 16 + static_cast<uint64_t>(i)) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  if (group.scale != nullptr) std::memcpy(group.scale->out.data(), scale_codes.data(), scale_codes.size());
}

void fill_group(const Group& group, uint64_t seed) {
  const FillJob* first = group.weight ? group.weight
                         : group.scale ? group.scale
                         : group.zero  ? group.zero
                         : group.shape ? group.shape
                         : group.global ? group.global
                                       : group.input;
  if (first == nullptr) first = group.group_index;
  if (first != nullptr && (first->spec->quant == Quant::kCtNvfp4 || first->spec->quant == Quant::kModeloptNvfp4)) {
    fill_nvfp4(group, seed);
    return;
  }
  if (first != nullptr && first->spec->quant == Quant::kAwq) {
    fill_awq(group, seed);
    return;
  }
  if (first != nullptr && is_gptq(first->spec->quant)) {
    fill_gptq(group, seed);
    return;
  }
  if (first != nullptr && (is_packed_int(first->spec->quant) || first->spec->quant == Quant::kCtW8a8)) {
    fill_packed_int(group, seed);
    return;
  }
  if (group.input != nullptr) {
    // llm-compressor observes each module's input, so the projections that read one input (q/k/v,
    // gate/up, an expert's gate/up, q_a/kv_a) get one input scale; vLLM's compressed-tensors MoE
    // refuses gate and up scales that differ. make-tiny's "fp8" checkpoints keep them apart, so
    // that taking the largest part's input scale is tested.
    const TensorSpec& spec = *group.input->spec;
    const std::string_view module = module_of(spec);
    const std::string name =
        is_compressed_tensors(spec.quant) ? std::string(fused_part(module).layer) : spec.name;
    write_floats({0.01f + 0.09f * uniform(seed, name, kInputSalt, 0)}, spec.dtype,
                 group.input->out);
  }
  if (group.weight == nullptr && group.scale == nullptr) return;
  const TensorSpec& any = group.weight != nullptr ? *group.weight->spec : *group.scale->spec;
  const std::string_view module = module_of(any);
  const std::string weight = std::string(module) + ".weight";
  const Shape& shape = group.weight != nullptr ? any.shape : any.weight_shape;
  const Grid grid = grid_of(weight, shape, any.quant);
  const std::vector<float> values = reference_values(weight, shape, seed);
  const DType stored = is_compressed_tensors(any.quant) ? DType::kBF16 : DType::kF32;
  const std::vector<float> scales = block_scales(values, grid, seed, module, stored);
  if (group.weight != nullptr) write_codes(values, scales, grid, group.weight->out);
  if (group.scale != nullptr) write_floats(scales, stored, group.scale->out);
}

}  // namespace

const std::vector<std::string>& quant_names() {
  static const std::vector<std::string> names = {"none",          "fp8",           "fp8-block",
                                                 "ct-fp8-tensor", "ct-fp8-channel", "ct-fp8-block",
                                                 "mxfp4",         "ct-w4a16",      "ct-w4a16-asym",
                                                 "ct-w8a16",      "ct-w8a8",       "ct-nvfp4",
                                                 "gptq",          "gptq-channel",  "awq",
                                                 "modelopt-nvfp4"};
  return names;
}

std::optional<Quant> parse_quant(std::string_view name) {
  static constexpr Quant kInOrder[] = {Quant::kNone,     Quant::kFp8,       Quant::kFp8Block,
                                       Quant::kCtTensor, Quant::kCtChannel, Quant::kCtBlock,
                                       Quant::kMxfp4,    Quant::kCtW4a16,   Quant::kCtW4a16Asym,
                                       Quant::kCtW8a16,  Quant::kCtW8a8,  Quant::kCtNvfp4,
                                       Quant::kGptq,     Quant::kGptqChannel, Quant::kAwq,
                                       Quant::kModeloptNvfp4};
  const auto& names = quant_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return kInOrder[i];
  }
  return std::nullopt;
}

std::vector<TensorSpec> fp8_tensors(const std::string& module, const Shape& shape, Quant quant,
                                    bool static_activations) {
  const Grid g = grid_of(module + ".weight", shape, quant);
  std::vector<TensorSpec> specs;
  specs.push_back({module + ".weight", DType::kF8E4M3, shape, ValueKind::kWeight, quant});
  if (is_compressed_tensors(quant)) {
    // llm-compressor: every scale is weight_scale, in the model dtype; per tensor it is [1].
    const Shape scale_shape =
        quant == Quant::kCtTensor ? Shape{1} : Shape{g.grid_rows, g.grid_cols};
    specs.push_back({module + ".weight_scale", DType::kBF16, scale_shape, ValueKind::kWeightScale,
                     quant, shape});
    if (quant == Quant::kCtTensor && static_activations) {
      specs.push_back({module + ".input_scale", DType::kBF16, {1}, ValueKind::kInputScale, quant});
    }
    return specs;
  }
  if (quant == Quant::kFp8Block) {
    specs.push_back({module + ".weight_scale_inv",
                     DType::kF32,
                     {g.grid_rows, g.grid_cols},
                     ValueKind::kWeightScale,
                     quant,
                     shape});
    return specs;
  }
  specs.push_back(
      {module + ".weight_scale", DType::kF32, {}, ValueKind::kWeightScale, quant, shape});
  if (static_activations) {
    specs.push_back({module + ".input_scale", DType::kF32, {}, ValueKind::kInputScale, quant});
  }
  return specs;
}

std::vector<TensorSpec> packed_int_tensors(const std::string& module, const Shape& shape, Quant quant) {
  const IntScheme q = int_scheme(quant);
  const uint64_t rows = shape.at(0), cols = shape.at(1);
  const uint64_t group = q.group == 0 ? cols : q.group;
  if (cols % group != 0 || cols % q.pack() != 0 || (q.zero_points && rows % q.pack() != 0)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("make-tiny's {}-bit weights need whole {}-value groups and words", q.bits, group),
                {.tensor = module + ".weight", .expected = fmt::format("inputs a multiple of {}", group),
                 .found = fmt::format("[{}, {}]", rows, cols)});
  }
  std::vector<TensorSpec> specs;
  specs.push_back({module + ".weight_packed", DType::kI32, {rows, cols / q.pack()}, ValueKind::kWeight, quant, shape});
  specs.push_back({module + ".weight_scale", DType::kBF16, {rows, cols / group}, ValueKind::kWeightScale, quant, shape});
  if (q.zero_points) {
    specs.push_back({module + ".weight_zero_point", DType::kI32, {rows / q.pack(), cols / group},
                     ValueKind::kZeroPoint, quant, shape});
  }
  specs.push_back({module + ".weight_shape", DType::kI64, {2}, ValueKind::kWeightShape, quant, shape});
  return specs;
}

std::vector<TensorSpec> int8_tensors(const std::string& module, const Shape& shape, Quant quant) {
  const uint64_t rows = shape.at(0);
  return {{module + ".weight", DType::kI8, shape, ValueKind::kWeight, quant, shape},
          {module + ".weight_scale", DType::kBF16, {rows, 1}, ValueKind::kWeightScale, quant, shape}};
}

std::vector<TensorSpec> nvfp4_tensors(const std::string& module, const Shape& shape, Quant quant) {
  const uint64_t rows = shape.at(0), cols = shape.at(1);
  if (cols % 16 != 0) {
    throw Error(ErrorKind::kInvalidArgument, "make-tiny's NVFP4 weights need whole 16-value groups",
                {.tensor = module + ".weight", .expected = "inputs a multiple of 16",
                 .found = fmt::format("[{}, {}]", rows, cols)});
  }
  return {{module + ".weight_packed", DType::kU8, {rows, cols / 2}, ValueKind::kWeight, quant, shape},
          {module + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, ValueKind::kWeightScale, quant, shape},
          {module + ".weight_global_scale", DType::kF32, {1}, ValueKind::kGlobalScale, quant, shape},
          {module + ".input_global_scale", DType::kF32, {1}, ValueKind::kInputScale, quant, shape}};
}

std::vector<TensorSpec> modelopt_nvfp4_tensors(const std::string& module, const Shape& shape) {
  const uint64_t rows = shape.at(0), cols = shape.at(1);
  if (cols % 16 != 0) {
    throw Error(ErrorKind::kInvalidArgument, "make-tiny's NVFP4 weights need whole 16-value groups",
                {.tensor = module + ".weight", .expected = "inputs a multiple of 16",
                 .found = fmt::format("[{}, {}]", rows, cols)});
  }
  const Quant q = Quant::kModeloptNvfp4;
  return {{module + ".weight", DType::kU8, {rows, cols / 2}, ValueKind::kWeight, q, shape},
          {module + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, ValueKind::kWeightScale, q, shape},
          {module + ".weight_scale_2", DType::kF32, {}, ValueKind::kGlobalScale, q, shape},
          {module + ".input_scale", DType::kF32, {}, ValueKind::kInputScale, q, shape}};
}

std::vector<TensorSpec> gptq_tensors(const std::string& module, const Shape& shape, Quant quant) {
  const IntScheme q = gptq_scheme(quant);
  const uint64_t rows = shape.at(0), cols = shape.at(1);
  const uint64_t group = q.group == 0 ? cols : q.group;
  if (cols % group != 0 || cols % q.pack() != 0 || rows % q.pack() != 0) {
    throw Error(ErrorKind::kInvalidArgument, "make-tiny's GPTQ weights need whole 32-value groups and words",
                {.tensor = module + ".weight", .expected = "inputs a multiple of 32, outputs of 8",
                 .found = fmt::format("[{}, {}]", rows, cols)});
  }
  return {{module + ".qweight", DType::kI32, {cols / q.pack(), rows}, ValueKind::kWeight, quant, shape},
          {module + ".scales", DType::kF16, {cols / group, rows}, ValueKind::kWeightScale, quant, shape},
          {module + ".qzeros", DType::kI32, {cols / group, rows / q.pack()}, ValueKind::kZeroPoint, quant, shape},
          {module + ".g_idx", DType::kI32, {cols}, ValueKind::kGroupIndex, quant, shape}};
}

std::vector<TensorSpec> awq_tensors(const std::string& module, const Shape& shape) {
  const uint64_t rows = shape.at(0), cols = shape.at(1);
  if (cols % kTinyIntGroup != 0 || rows % 8 != 0) {
    throw Error(ErrorKind::kInvalidArgument, "make-tiny's AWQ weights need whole 32-value groups and words",
                {.tensor = module + ".weight", .expected = "inputs a multiple of 32, outputs of 8",
                 .found = fmt::format("[{}, {}]", rows, cols)});
  }
  return {{module + ".qweight", DType::kI32, {cols, rows / 8}, ValueKind::kWeight, Quant::kAwq, shape},
          {module + ".qzeros", DType::kI32, {cols / kTinyIntGroup, rows / 8}, ValueKind::kZeroPoint, Quant::kAwq, shape},
          {module + ".scales", DType::kF16, {cols / kTinyIntGroup, rows}, ValueKind::kWeightScale, Quant::kAwq, shape}};
}

void fill_quantized(std::span<const FillJob> jobs, uint64_t seed, unsigned threads) {
  std::map<std::string_view, Group>
      by_module;  // ordered, so the work list does not depend on hashing
  for (const FillJob& job : jobs) {
    Group& group = by_module[module_of(*job.spec)];
    switch (job.spec->kind) {
      case ValueKind::kWeight:
        group.weight = &job;
        break;
      case ValueKind::kWeightScale:
        group.scale = &job;
        break;
      case ValueKind::kInputScale:
        group.input = &job;
        break;
      case ValueKind::kZeroPoint:
        group.zero = &job;
        break;
      case ValueKind::kWeightShape:
        group.shape = &job;
        break;
      case ValueKind::kGlobalScale:
        group.global = &job;
        break;
      case ValueKind::kGroupIndex:
        group.group_index = &job;
        break;
      case ValueKind::kNorm:
      case ValueKind::kBias:
      case ValueKind::kMxfp4Codes:
      case ValueKind::kMxfp4Scales:
      case ValueKind::kIndices:
        throw Error(ErrorKind::kInvalidArgument, "not an FP8 weight or scale",
                    {.tensor = job.spec->name});
    }
  }
  std::vector<const Group*> work;
  for (const auto& [module, group] : by_module) work.push_back(&group);

  if (threads == 0) threads = static_cast<unsigned>(default_thread_count());
  threads = static_cast<unsigned>(std::min<size_t>({threads, kMaxThreads, work.size()}));
  parallel_for(work.size(), static_cast<int>(threads),
               [&](size_t i, int) { fill_group(*work[i], seed); });
}

}  // namespace shardload::tiny
