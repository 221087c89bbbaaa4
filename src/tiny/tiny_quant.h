#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tiny/tiny_model.h"
#include "tiny/tiny_values.h"

namespace shardload::tiny {

// Rows and columns of a DeepSeek-V3 FP8 block (weight_block_size [128, 128]).
inline constexpr uint64_t kFp8Block = arch::kFp8BlockSize;

// --quant spellings: "none", "fp8", "fp8-block", "ct-fp8-tensor", "ct-fp8-channel", "ct-fp8-block",
// "mxfp4", "ct-w4a16", "ct-w4a16-asym", "ct-w8a16", "ct-w8a8", "ct-nvfp4", "gptq", "gptq-channel", "awq", in that
// order.
const std::vector<std::string>& quant_names();
std::optional<Quant> parse_quant(std::string_view name);

// The tensors of one quantized projection: the F8_E4M3 weight, then its scales ("fp8":
// weight_scale F32 [] and, with static activations, input_scale F32 []; "fp8-block":
// weight_scale_inv F32 [ceil(out/128), ceil(in/128)]).
std::vector<TensorSpec> fp8_tensors(const std::string& module, const Shape& shape, Quant quant,
                                    bool static_activations);

// The tensors of one pack-quantized projection [out, in] as llm-compressor writes them: weight_packed
// I32 [out, in / (32 / bits)], weight_scale BF16 [out, in / group] ([out, 1] per channel), with zero
// points weight_zero_point I32 [out / (32 / bits), in / group], and weight_shape I64 [2].
std::vector<TensorSpec> packed_int_tensors(const std::string& module, const Shape& shape, Quant quant);

// The tensors of one int-quantized (W8A8 int8) projection [out, in]: weight I8 [out, in] and weight_scale
// BF16 [out, 1], as llm-compressor writes them.
std::vector<TensorSpec> int8_tensors(const std::string& module, const Shape& shape, Quant quant);

// The tensors of one NVFP4 projection [out, in] as llm-compressor writes them: weight_packed U8 [out, in / 2],
// weight_scale F8_E4M3 [out, in / 16], weight_global_scale and input_global_scale F32 [1].
std::vector<TensorSpec> nvfp4_tensors(const std::string& module, const Shape& shape, Quant quant);
// The same projection as NVIDIA ModelOpt writes it: weight U8 [out, in / 2], weight_scale F8_E4M3
// [out, in / 16], weight_scale_2 and input_scale F32 scalars (the reciprocals of llm-compressor's).
std::vector<TensorSpec> modelopt_nvfp4_tensors(const std::string& module, const Shape& shape);

// Fills FP8 weights and their scale tensors (jobs whose spec.quant is set) from the bf16 values
// that fill_values gives the weight: per tensor (fp8) or per 128x128 block (fp8-block, partial edge
// blocks included), s = amax / 448 * f with f a factor in [1, 4) drawn from (seed, name, block)
// such that the parts of a fused layer (q/k/v, gate/up, w1/w3, q_a/kv_a) differ by a ratio of about
// 4/3 or more, and codes fp8_e4m3(w / s) in float32. input_scale is a value in [0.01, 0.1) drawn
// from (seed, name). A weight and its scales need not be in the same call: each is recomputed from
// the seed. Uses up to `threads` threads (0: one per core).
// Packed integer weights the same way: per group (or row) s = amax / qmax (symmetric) or
// (max - min) / (2^bits - 1) with a zero point, in BF16, codes round(w / s) (+ zero point) clamped,
// stored offset by 2^(bits-1), value j of a word at bits bits*j. int8 weights: the same codes per row
// (s = amax / 127, codes clamped to [-128, 127]), stored as they are. NVFP4: a global scale
// g = 448 * 6 / amax of the projection, per 16 inputs s = fp8(amax / 6 * g), codes the nearest E2M1 value
// of w * g / s (value 2j of a byte in its low nibble); the input global scale a value in [10, 100).
// The tensors of one GPTQ projection [out, in] as AutoGPTQ / GPTQModel write them (v1): qweight I32
// [in / 8, out] (value j of a word is input 8w + j, stored + 8), scales F16 [in / 32, out], qzeros I32
// [in / 32, out / 8] (each 8 - 1: symmetric) and g_idx I32 [in] (input i's group, i / 32).
// kGptqChannel: scales [1, out], qzeros [1, out / 8], every g_idx 0.
std::vector<TensorSpec> gptq_tensors(const std::string& module, const Shape& shape, Quant quant);

// The tensors of one AWQ projection [out, in] as AutoAWQ's GEMM format has them: qweight I32 [in, out / 8]
// (nibble j of word c holds output 8c + [0, 2, 4, 6, 1, 3, 5, 7][j], stored + 8), qzeros I32 [in / 32, out / 8]
// packed the same way, scales F16 [in / 32, out].
std::vector<TensorSpec> awq_tensors(const std::string& module, const Shape& shape);

void fill_quantized(std::span<const FillJob> jobs, uint64_t seed, unsigned threads = 0);

}  // namespace shardload::tiny
