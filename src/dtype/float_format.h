#pragma once

#include <bit>
#include <cstdint>

namespace shardload::dtype_internal {

// What a narrow format does with magnitudes beyond its largest finite value.
enum class Overflow {
  kToInfinity,      // IEEE: round to nearest, which may reach infinity (F16, BF16)
  kSaturateFinite,  // finite values clamp to the largest finite value; infinity stays (F8_E5M2)
  kSaturateAll,     // no infinity exists, so infinity clamps too (F8_E4M3, e4m3fn)
};

// A binary floating format narrower than float32: 1 sign bit, then exponent and mantissa fields.
// Formats with infinity use the IEEE layout (all-ones exponent is infinity or NaN); the ones
// without infinity (e4m3fn) spend that exponent on finite values and keep only all-ones magnitude
// as NaN.
template <typename StorageT, int kExponent, int kMantissa, int kBiasValue, Overflow kOverflowValue>
struct NarrowFormat {
  using Storage = StorageT;
  static constexpr int kExponentBits = kExponent;
  static constexpr int kMantissaBits = kMantissa;
  static constexpr int kBias = kBiasValue;
  static constexpr Overflow kOverflow = kOverflowValue;

  static constexpr int kMagnitudeBits = kExponentBits + kMantissaBits;
  static constexpr uint32_t kMagnitudeMask = (1u << kMagnitudeBits) - 1;
  static constexpr uint32_t kMantissaMask = (1u << kMantissaBits) - 1;
  static constexpr bool kHasInfinity = kOverflow != Overflow::kSaturateAll;
  static constexpr uint32_t kInfinityCode = ((1u << kExponentBits) - 1) << kMantissaBits;
  static constexpr uint32_t kQuietBit = 1u << (kMantissaBits - 1);
  static constexpr uint32_t kMaxFiniteCode = kHasInfinity ? kInfinityCode - 1 : kMagnitudeMask - 1;
  static constexpr uint32_t kNanCode = kHasInfinity ? kInfinityCode | kQuietBit : kMagnitudeMask;
};

using Bf16 = NarrowFormat<uint16_t, 8, 7, 127, Overflow::kToInfinity>;
using F16 = NarrowFormat<uint16_t, 5, 10, 15, Overflow::kToInfinity>;
using F8E4M3 = NarrowFormat<uint8_t, 4, 3, 7, Overflow::kSaturateAll>;
using F8E5M2 = NarrowFormat<uint8_t, 5, 2, 15, Overflow::kSaturateFinite>;

// The two hardware formats that narrow formats are decoded into and encoded from.
template <typename Wide>
struct WideFormat;

template <>
struct WideFormat<float> {
  using Bits = uint32_t;
  static constexpr int kExponentBits = 8;
  static constexpr int kMantissaBits = 23;
  static constexpr int kBias = 127;
};

template <>
struct WideFormat<double> {
  using Bits = uint64_t;
  static constexpr int kExponentBits = 11;
  static constexpr int kMantissaBits = 52;
  static constexpr int kBias = 1023;
};

// 2^exponent as a Wide, for exponents in Wide's normal range.
template <typename Wide>
constexpr Wide power_of_two(int exponent) {
  using W = WideFormat<Wide>;
  return std::bit_cast<Wide>(static_cast<typename W::Bits>(exponent + W::kBias)
                             << W::kMantissaBits);
}

}  // namespace shardload::dtype_internal
