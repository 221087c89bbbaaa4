#pragma once

// Holds tensors rebuilt from an export (reassemble.h) to the checkpoint they came from, value by
// value, after the cast layout.md prescribes: round to nearest even, through float32, dividing in
// float32 first for a divided row bias.

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reassemble.h"
#include "shardload/checkpoint.h"
#include "shardload/convert.h"
#include "shardload/error.h"

namespace shardload::testing {

// One element as float32 (exact for BF16, F16 and F32).
inline float element_f32(DType dtype, const std::byte* p) {
  uint16_t half = 0;
  float value = 0;
  switch (dtype) {
    case DType::kBF16:
      std::memcpy(&half, p, 2);
      return bf16_to_f32(half);
    case DType::kF16:
      std::memcpy(&half, p, 2);
      return f16_to_f32(half);
    case DType::kF32:
      std::memcpy(&value, p, 4);
      return value;
    default:
      throw Error(ErrorKind::kInvalidArgument, "test: not a 16/32-bit float dtype");
  }
}

// The bits of `value` cast to `dtype`, rounding to nearest even.
inline uint32_t cast_bits(float value, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return f32_to_bf16(value);
    case DType::kF16:
      return f32_to_f16(value);
    case DType::kF32:
      return std::bit_cast<uint32_t>(value);
    default:
      throw Error(ErrorKind::kInvalidArgument, "test: not a 16/32-bit float dtype");
  }
}

inline uint32_t element_bits(DType dtype, const std::byte* p) {
  uint32_t bits = 0;
  std::memcpy(&bits, p, dtype_bits(dtype) / 8);  // little-endian host
  return bits;
}

// Whether `bits` of a 16/32-bit float dtype are a NaN: any NaN stands for a NaN (layout.md does not
// fix the payload).
inline bool is_nan_bits(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kBF16:
      return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
    case DType::kF16:
      return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
    case DType::kF32:
      return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0;
    default:
      return false;
  }
}

// Holds the rebuilt tensors to the checkpoint: every checkpoint tensor is rebuilt or skipped by a
// rule, nothing else is rebuilt, and each value equals the checkpoint's value cast to the export
// dtype (float32 for the tensors kept in float32), divided in float32 first for a divided row bias.
inline void compare_with_checkpoint(const Checkpoint& checkpoint, const RebuiltCheckpoint& rebuilt,
                                    DType dtype, Problems& problems) {
  const ConfigView config = ConfigView::from_json(checkpoint.config());
  for (const std::string& name : checkpoint.tensor_names()) {
    const auto it = rebuilt.find(name);
    if (it == rebuilt.end()) {
      if (!skipped_by_rule(name, config)) {
        problems.add("checkpoint tensor {} is neither in the export nor skipped by a rule", name);
      }
      continue;
    }
    if (skipped_by_rule(name, config))
      problems.add("{} should have been skipped but was exported", name);
    const Checkpoint::Entry& entry = checkpoint.at(name);
    const TensorInfo& info = *entry.info;
    const Rebuilt& got = it->second;
    if (got.tensor.shape != info.shape) {
      problems.add("{}: rebuilt from {} as {}, checkpoint has {}", name, got.from,
                   shape_string(got.tensor.shape), shape_string(info.shape));
      continue;
    }
    const DType want = kept_float32(got.from, config) ? DType::kF32 : dtype;
    if (got.tensor.dtype != want) continue;  // already reported by the reassembler
    std::vector<std::byte> source(info.nbytes());
    checkpoint.files()[entry.file].read(info, source);
    const size_t in_size = dtype_bits(info.dtype) / 8;
    const size_t out_size = dtype_bits(want) / 8;
    const uint64_t n = shape_numel(info.shape);
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < n; ++i) {
      float value = element_f32(info.dtype, source.data() + i * in_size);
      if (got.divisor != 1) value = value / static_cast<float>(got.divisor);
      const uint32_t expected = cast_bits(value, want);
      const uint32_t found = element_bits(want, got.tensor.bytes.data() + i * out_size);
      if (expected == found || (is_nan_bits(want, expected) && is_nan_bits(want, found))) continue;
      if (mismatches++ == 0) {
        problems.add("{} (from {}): element {} is {:#x}, expected {:#x} (checkpoint {} value {}{})",
                     name, got.from, i, found, expected, dtype_name(info.dtype),
                     element_f32(info.dtype, source.data() + i * in_size),
                     got.divisor != 1 ? fmt::format(" / {}", got.divisor) : "");
      }
    }
    if (mismatches > 1) problems.add("{}: {} of {} elements differ", name, mismatches, n);
  }
  for (const auto& [name, got] : rebuilt) {
    if (checkpoint.find(name) == nullptr) {
      problems.add("the export has {} (from {}), the checkpoint has no such tensor", name,
                   got.from);
    }
  }
}

}  // namespace shardload::testing
