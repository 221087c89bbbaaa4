#pragma once

#include <cstddef>

#include "dtype/float_type.h"

// Bulk conversion loops, one copy per instruction set, so that the binary runs on any x86-64 (never
// -march) and the best copy is picked at run time. src and dst must not overlap.

namespace shardload::dtype_internal {

enum class Isa {
  kBaseline,  // what the compiler targets by default (SSE2 on x86-64)
  kAvx2,      // AVX2 and FMA
  kAvx512,    // x86-64-v4: AVX-512 F, BW, CD, DQ and VL
};

inline constexpr Isa kAllIsas[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512};

bool cpu_supports(Isa isa);

// The fastest instruction set this CPU supports, determined once.
Isa best_isa();

// Converts n elements from `from` to `to` (different types) with the loops for `isa`, which the CPU
// must support.
void convert_with(Isa isa, FloatType from, FloatType to, const std::byte* src, std::byte* dst,
                  size_t n);

}  // namespace shardload::dtype_internal
