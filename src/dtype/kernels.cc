#include "dtype/kernels.h"

#include "dtype/codec.h"
#include "dtype/float_format.h"
#include "dtype/kernel_loop.h"

// One copy of all the loops per instruction set, each compiled with its own target attribute and
// picked at run time (kernels.h). Not target_clones: the copies differ in source too (the select
// style, see codec.h).

namespace shardload::dtype_internal {
namespace {

// The pair is switched on once per call; each case is a separate, vectorized loop.
template <typename Src, Select kSelect>
[[gnu::always_inline]] inline void convert_to(FloatType to, const std::byte* src, std::byte* dst,
                                              size_t n) {
  switch (to) {
    case FloatType::kF16: return convert_any<Src, F16, kSelect>(src, dst, n);
    case FloatType::kBF16: return convert_any<Src, Bf16, kSelect>(src, dst, n);
    case FloatType::kF32: return convert_any<Src, float, kSelect>(src, dst, n);
    case FloatType::kF64: return convert_any<Src, double, kSelect>(src, dst, n);
    case FloatType::kF8E4M3: return convert_any<Src, F8E4M3, kSelect>(src, dst, n);
    case FloatType::kF8E5M2: return convert_any<Src, F8E5M2, kSelect>(src, dst, n);
  }
}

template <Select kSelect>
[[gnu::always_inline]] inline void convert_pair(FloatType from, FloatType to, const std::byte* src,
                                                std::byte* dst, size_t n) {
  switch (from) {
    case FloatType::kF16: return convert_to<F16, kSelect>(to, src, dst, n);
    case FloatType::kBF16: return convert_to<Bf16, kSelect>(to, src, dst, n);
    case FloatType::kF32: return convert_to<float, kSelect>(to, src, dst, n);
    case FloatType::kF64: return convert_to<double, kSelect>(to, src, dst, n);
    case FloatType::kF8E4M3: return convert_to<F8E4M3, kSelect>(to, src, dst, n);
    case FloatType::kF8E5M2: return convert_to<F8E5M2, kSelect>(to, src, dst, n);
  }
}

void convert_baseline(FloatType from, FloatType to, const std::byte* src, std::byte* dst,
                      size_t n) {
  convert_pair<Select::kBitwise>(from, to, src, dst, n);
}

#if defined(__x86_64__)

[[gnu::target("avx2,fma")]] void convert_avx2(FloatType from, FloatType to, const std::byte* src,
                                              std::byte* dst, size_t n) {
  convert_pair<Select::kBitwise>(from, to, src, dst, n);
}

[[gnu::target("arch=x86-64-v4")]] void convert_avx512(FloatType from, FloatType to,
                                                      const std::byte* src, std::byte* dst,
                                                      size_t n) {
  convert_pair<Select::kTernary>(from, to, src, dst, n);
}

#endif

}  // namespace

bool cpu_supports(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kBaseline: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

Isa best_isa() {
  static const Isa best = [] {
    if (cpu_supports(Isa::kAvx512)) return Isa::kAvx512;
    if (cpu_supports(Isa::kAvx2)) return Isa::kAvx2;
    return Isa::kBaseline;
  }();
  return best;
}

void convert_with(Isa isa, FloatType from, FloatType to, const std::byte* src, std::byte* dst,
                  size_t n) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kBaseline: return convert_baseline(from, to, src, dst, n);
    case Isa::kAvx2: return convert_avx2(from, to, src, dst, n);
    case Isa::kAvx512: return convert_avx512(from, to, src, dst, n);
  }
#else
  static_cast<void>(isa);
  convert_baseline(from, to, src, dst, n);
#endif
}

}  // namespace shardload::dtype_internal
