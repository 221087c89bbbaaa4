// The checkpoint tensors of a generated model: the family writes their names and shapes (its
// descriptor's tiny_tensors, src/model/arch/); this file turns them into specs, FP8 with their
// scale tensors where the family says a matrix is a linear projection and --quant asks for FP8.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "model/module_match.h"
#include "tiny/tiny_model.h"
#include "tiny/tiny_quant.h"

namespace shardload::tiny {

namespace {

class Builder final : public arch::TensorWriter {
 public:
  explicit Builder(const TinyModel& model) : m_(model) {}

  // The family writes the text model's names; a multimodal config's checkpoint has them under its
  // prefix (the other towers are not written).
  std::vector<TensorSpec> take() {
    if (!m_.weight_prefix.empty()) {
      for (TensorSpec& spec : specs_) spec.name = arch::checkpoint_name(*m_.family, m_.weight_prefix, spec.name);
    }
    return std::move(specs_);
  }

  void projection(const std::string& module, uint64_t out, uint64_t in) override {
    if (m_.quant == Quant::kNone || m_.quant == Quant::kMxfp4 || family_ignores(module)) {
      add(module + ".weight", {out, in}, ValueKind::kWeight, DType::kBF16);
      return;
    }
    for (TensorSpec& spec : is_packed_int(m_.quant)         ? packed_int_tensors(module, {out, in}, m_.quant)
                            : m_.quant == Quant::kCtW8a8 ? int8_tensors(module, {out, in}, m_.quant)
                            : m_.quant == Quant::kCtNvfp4 ? nvfp4_tensors(module, {out, in}, m_.quant)
                            : m_.quant == Quant::kModeloptNvfp4 ? modelopt_nvfp4_tensors(module, {out, in})
                            : is_gptq(m_.quant)          ? gptq_tensors(module, {out, in}, m_.quant)
                            : m_.quant == Quant::kAwq     ? awq_tensors(module, {out, in})
                                                          : fp8_tensors(module, {out, in}, m_.quant, m_.static_activations)) {
      if (spec.kind == ValueKind::kWeightShape && m_.family->tiny_int32_weight_shape) spec.dtype = DType::kI32;
      specs_.push_back(std::move(spec));
    }
  }
  void weight(const std::string& name, Shape shape, DType dtype) override {
    add(name, std::move(shape), ValueKind::kWeight, dtype);
  }
  void norm(const std::string& module, uint64_t size) override {
    add(module + ".weight", {size}, ValueKind::kNorm, DType::kBF16);
  }
  void bias(const std::string& name, Shape shape, DType dtype) override {
    add(name, std::move(shape), ValueKind::kBias, dtype);
  }
  void mxfp4(const std::string& name, Shape blocks) override {
    Shape scales = blocks;
    scales.pop_back();
    add(name + "_blocks", std::move(blocks), ValueKind::kMxfp4Codes, DType::kU8);
    add(name + "_scales", std::move(scales), ValueKind::kMxfp4Scales, DType::kU8);
  }
  void stored_bytes(const std::string& name, Shape shape, DType dtype, bool exponents) override {
    add(name, std::move(shape),
        exponents ? ValueKind::kMxfp4Scales : dtype == DType::kI32 ? ValueKind::kIndices : ValueKind::kMxfp4Codes,
        dtype);
  }

 private:
  // The family's own compressed-tensors `ignore` (Kimi-K2.5: the routed experts alone quantized); the
  // quant_method fp8 formats quantize every projection, as they have no such list shardload reads.
  bool family_ignores(const std::string& module) const {
    if (!is_compressed_tensors(m_.quant)) return false;
    const auto& ignore = m_.family->tiny_quant_ignore;
    return std::any_of(ignore.begin(), ignore.end(),
                       [&](std::string_view entry) { return module_matches(entry, module); });
  }

  void add(std::string name, Shape shape, ValueKind kind, DType dtype) {
    specs_.push_back({std::move(name), dtype, std::move(shape), kind});
  }

  const TinyModel& m_;
  std::vector<TensorSpec> specs_;
};

}  // namespace

std::vector<TensorSpec> model_tensors(const TinyModel& m) {
  Builder b(m);
  m.family->tiny_tensors(m, b);
  return b.take();
}

uint64_t total_bytes(const TinyModel& m) {
  uint64_t total = 0;
  for (const TensorSpec& spec : model_tensors(m)) total += shape_nbytes(spec.shape, spec.dtype);
  return total;
}

}  // namespace shardload::tiny
