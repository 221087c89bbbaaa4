#pragma once

// Branch-free scalar encoders and decoders between the narrow formats and float/double. They are
// written as selects over plain integer and float operations so that a loop calling them
// vectorizes; the scalar API and the bulk kernels share them, which keeps the two bit-for-bit
// identical.

#include <algorithm>
#include <bit>
#include <cstdint>

#include "dtype/float_format.h"

namespace shardload::dtype_internal {

// How the element code below picks between two values. A ternary compiles to one masked blend with
// AVX-512, where GCC if-converts anything. Without AVX-512 masking GCC only vectorizes a select
// whose arms cannot trap; as floating-point operations may trap (-ftrapping-math, the default), a
// ternary near one gets turned into a branch that keeps the loop scalar. Masks and bit operations
// leave GCC nothing to branch on, at two or three extra operations per select.
enum class Select { kTernary, kBitwise };

template <Select kSelect, typename T>
[[gnu::always_inline]] inline T choose(bool cond, T if_true, T if_false) {
  if constexpr (kSelect == Select::kTernary) {
    return cond ? if_true : if_false;
  } else {
    const T mask = T{0} - static_cast<T>(cond);
    return (if_true & mask) | (if_false & ~mask);
  }
}

// The narrow code of a finite wide magnitude (sign bit clear) no larger than Narrow's clamping
// limit (see encode_magnitude), rounded to nearest, ties to even. Also exact for the bits widen()
// makes of an infinity or NaN code.
template <typename Narrow, typename Wide>
[[gnu::always_inline]] inline uint32_t round_magnitude(typename WideFormat<Wide>::Bits input) {
  using W = WideFormat<Wide>;
  using Bits = typename W::Bits;
  constexpr int kShift = W::kMantissaBits - Narrow::kMantissaBits;
  constexpr Bits kRebias = static_cast<Bits>(W::kBias - Narrow::kBias) << W::kMantissaBits;
  if constexpr (Narrow::kBias == W::kBias) {
    // Same exponent range (float to bf16): the narrow code is the top of the wide bits, so rounding
    // away the low kShift bits to nearest even is all there is. A carry out of the mantissa bumps
    // the exponent, which is the right result at binade edges and at the top (infinity); wide
    // subnormals line up with narrow ones.
    const Bits round_bias = ((Bits{1} << (kShift - 1)) - 1) + ((input >> kShift) & 1);
    return static_cast<uint32_t>((input + round_bias) >> kShift);
  } else {
    // Let the floating-point adder round. Adding 2^k, with k such that the ulp of 2^k equals the
    // narrow spacing around the value, rounds the value to a narrow value, nearest even; the low
    // bits of the sum count narrow ulps above 2^k. The spacing is that of the value's binade, or of
    // the smallest normal binade for subnormals, so k follows the value's exponent, floored.
    // In the value's binade b (numbered from the smallest normal one) the count is the mantissa
    // including its leading 1 (2^M ulps), or 2^(M+1) when it rounds up into the next binade; adding
    // b << M gives the code either way, and for subnormals (b = 0, no leading 1) as well. Only
    // normal numbers enter the adder, so flush-to-zero modes do not change the result.
    constexpr Bits kExponentMask = ((Bits{1} << W::kExponentBits) - 1) << W::kMantissaBits;
    constexpr Bits kMinNormal = (Bits{1} << W::kMantissaBits) + kRebias;
    const Bits binade = std::max(input & kExponentMask, kMinNormal);
    const Bits magic = binade + (static_cast<Bits>(kShift) << W::kMantissaBits);
    const Wide sum = std::bit_cast<Wide>(input) + std::bit_cast<Wide>(magic);
    return static_cast<uint32_t>(std::bit_cast<Bits>(sum) - magic) +
           static_cast<uint32_t>((binade - kMinNormal) >> kShift);
  }
}

// The Narrow code, without its sign bit, of the Wide value with these magnitude bits (sign bit
// clear): rounded to nearest, ties to even, with Narrow's overflow rule. NaN stays NaN: formats
// with infinity keep the top payload bits and set the quiet bit, e4m3fn has a single NaN.
template <typename Narrow, typename Wide, Select kSelect = Select::kTernary>
[[gnu::always_inline]] inline uint32_t encode_magnitude(typename WideFormat<Wide>::Bits magnitude) {
  using W = WideFormat<Wide>;
  using Bits = typename W::Bits;
  constexpr int kShift = W::kMantissaBits - Narrow::kMantissaBits;
  constexpr Bits kWideInfinity = ((Bits{1} << W::kExponentBits) - 1) << W::kMantissaBits;
  constexpr Bits kRebias = static_cast<Bits>(W::kBias - Narrow::kBias) << W::kMantissaBits;
  // The wide bits that round_magnitude turns into exactly this narrow code; for the all-ones
  // exponent (infinity, NaN) too, since the arithmetic does not care what the code means.
  constexpr auto widen = [](uint32_t code) {
    return (static_cast<Bits>(code) << kShift) + kRebias;
  };

  // Everything that does not round is settled on the input, so that one rounding computes every
  // result. Magnitudes are clamped: saturating formats to their largest finite value (spec: clamp,
  // then round), IEEE formats to the first power of two past their range, which rounds to the
  // infinity code, so that wide infinities and huge finite values become infinity.
  constexpr uint32_t kLimitCode =
      Narrow::kOverflow == Overflow::kToInfinity ? Narrow::kInfinityCode : Narrow::kMaxFiniteCode;
  constexpr Bits kLimit = widen(kLimitCode);
  // Rounding in integers (equal exponent ranges) leaves no floating-point operation to worry about.
  constexpr Select kInputSelect = Narrow::kBias == W::kBias ? Select::kTernary : kSelect;
  Bits input = choose<kInputSelect>(magnitude < kLimit, magnitude, kLimit);
  if constexpr (Narrow::kOverflow == Overflow::kSaturateFinite) {
    input = choose<kInputSelect>(magnitude == kWideInfinity, widen(Narrow::kInfinityCode), input);
  }
  uint32_t nan = Narrow::kNanCode;
  if constexpr (Narrow::kHasInfinity) {
    nan |= static_cast<uint32_t>(magnitude >> kShift) & Narrow::kMantissaMask;  // the payload
  }
  input = choose<kInputSelect>(magnitude > kWideInfinity, widen(nan), input);
  return round_magnitude<Narrow, Wide>(input);
}

// Rounds `value` to the nearest Narrow value as encode_magnitude does, keeping the sign. Taking
// double directly (not through float) avoids rounding twice.
template <typename Narrow, Select kSelect = Select::kTernary, typename Wide>
[[gnu::always_inline]] inline typename Narrow::Storage encode(Wide value) {
  using W = WideFormat<Wide>;
  using Bits = typename W::Bits;
  constexpr int kSignShift = W::kExponentBits + W::kMantissaBits;
  constexpr Bits kMagnitudeMask = (Bits{1} << kSignShift) - 1;
  const Bits bits = std::bit_cast<Bits>(value);
  const uint32_t sign = static_cast<uint32_t>(bits >> kSignShift) << Narrow::kMagnitudeBits;
  return static_cast<typename Narrow::Storage>(
      encode_magnitude<Narrow, Wide, kSelect>(bits & kMagnitudeMask) | sign);
}

// The float32 value of a Narrow code; exact, since every narrow format here fits in float32. NaN
// decodes to a quiet NaN carrying the narrow payload (bf16 bits, the top half of a float32, pass
// unchanged).
template <typename Narrow, Select kSelect = Select::kTernary>
[[gnu::always_inline]] inline float decode(typename Narrow::Storage code) {
  using W = WideFormat<float>;
  constexpr int kShift = W::kMantissaBits - Narrow::kMantissaBits;
  if constexpr (Narrow::kBias == W::kBias && Narrow::kExponentBits == W::kExponentBits) {
    return std::bit_cast<float>(static_cast<uint32_t>(code) << kShift);
  } else {
    constexpr uint32_t kRebias = static_cast<uint32_t>(W::kBias - Narrow::kBias)
                                 << W::kMantissaBits;
    constexpr uint32_t kWideInfinity = 0x7F800000u;
    constexpr uint32_t kWideQuietBit = 0x00400000u;
    // A subnormal code with mantissa m is m units of 2^(1 - bias - M). 2^k with m in its low bits,
    // where k makes the ulp of 2^k that unit, minus 2^k gives exactly that, with normal operands
    // only (so flush-to-zero modes do not matter).
    constexpr float kMagic =
        power_of_two<float>(W::kMantissaBits + 1 - Narrow::kBias - Narrow::kMantissaBits);

    const uint32_t bits = code;
    const uint32_t sign = (bits >> Narrow::kMagnitudeBits) << 31;
    const uint32_t magnitude = bits & Narrow::kMagnitudeMask;
    const uint32_t mantissa = magnitude & Narrow::kMantissaMask;

    uint32_t wide = (magnitude << kShift) + kRebias;
    if constexpr (Narrow::kHasInfinity) {
      const uint32_t quiet = choose<kSelect>(mantissa != 0, kWideQuietBit, 0u);
      const uint32_t special = kWideInfinity | quiet | (mantissa << kShift);
      wide = choose<kSelect>(magnitude >= Narrow::kInfinityCode, special, wide);
    } else {
      wide = choose<kSelect>(magnitude == Narrow::kNanCode, kWideInfinity | kWideQuietBit, wide);
    }
    const float subnormal =
        std::bit_cast<float>(std::bit_cast<uint32_t>(kMagic) | mantissa) - kMagic;
    wide = choose<kSelect>(magnitude <= Narrow::kMantissaMask, std::bit_cast<uint32_t>(subnormal),
                           wide);
    return std::bit_cast<float>(wide | sign);
  }
}

}  // namespace shardload::dtype_internal
