#pragma once

// An independent float64 model of the narrow float formats, used as the oracle by the dtype tests.
// It works on values (frexp, ldexp, floor on double, all exact here), not on bit tricks, and shares
// no code or constants with src/dtype.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace shardload::testing {

struct RefFormat {
  std::string name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_infinity;     // IEEE layout: all-ones exponent means infinity (mantissa 0) or NaN
  bool saturate_finite;  // finite values past the largest finite clamp to it instead of overflowing
};

inline const RefFormat kRefBf16{"bf16", 8, 7, 127, true, false};
inline const RefFormat kRefF16{"f16", 5, 10, 15, true, false};
inline const RefFormat kRefE4M3{"e4m3fn", 4, 3, 7, false, true};
inline const RefFormat kRefE5M2{"e5m2", 5, 2, 15, true, true};

inline uint32_t ref_sign_bit(const RefFormat& f) {
  return 1u << (f.exponent_bits + f.mantissa_bits);
}
inline uint32_t ref_code_count(const RefFormat& f) { return ref_sign_bit(f) << 1; }
inline uint32_t ref_exponent_max(const RefFormat& f) { return (1u << f.exponent_bits) - 1; }
inline uint32_t ref_infinity_code(const RefFormat& f) {
  return ref_exponent_max(f) << f.mantissa_bits;
}

inline bool ref_is_nan(const RefFormat& f, uint32_t code) {
  const uint32_t magnitude = code & (ref_sign_bit(f) - 1);
  const uint32_t exponent = magnitude >> f.mantissa_bits;
  const uint32_t mantissa = magnitude & ((1u << f.mantissa_bits) - 1);
  if (f.has_infinity) return exponent == ref_exponent_max(f) && mantissa != 0;
  // e4m3fn: only all-ones magnitude is NaN; the rest of the top binade is finite.
  return magnitude == ref_sign_bit(f) - 1;
}

// The largest finite magnitude's code (the non-negative codes below it are finite and increasing).
inline uint32_t ref_max_finite_code(const RefFormat& f) {
  return f.has_infinity ? ref_infinity_code(f) - 1 : ref_sign_bit(f) - 2;
}

// The textbook value of a code: (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m for e == 0.
inline double ref_decode(const RefFormat& f, uint32_t code) {
  if (ref_is_nan(f, code)) return std::numeric_limits<double>::quiet_NaN();
  const bool negative = (code & ref_sign_bit(f)) != 0;
  const uint32_t magnitude = code & (ref_sign_bit(f) - 1);
  const int exponent = static_cast<int>(magnitude >> f.mantissa_bits);
  const double mantissa = magnitude & ((1u << f.mantissa_bits) - 1);
  double value;
  if (f.has_infinity && static_cast<uint32_t>(exponent) == ref_exponent_max(f)) {
    value = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    value = std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  } else {
    value = std::ldexp(std::ldexp(1.0, f.mantissa_bits) + mantissa,
                       exponent - f.bias - f.mantissa_bits);
  }
  return negative ? -value : value;
}

inline double ref_max_finite(const RefFormat& f) { return ref_decode(f, ref_max_finite_code(f)); }

// The code of x rounded to the nearest representable value, ties to the even mantissa, with the
// format's overflow rule. x must not be NaN.
inline uint32_t ref_encode(const RefFormat& f, double x) {
  const uint32_t sign = std::signbit(x) ? ref_sign_bit(f) : 0;
  double a = std::fabs(x);
  const double max_finite = ref_max_finite(f);
  if (std::isinf(a) && f.has_infinity) return sign | ref_infinity_code(f);
  if (f.saturate_finite) a = std::fmin(a, max_finite);  // clamp, then round

  // The spacing 2^q of representable values around a; subnormals share the smallest normal's
  // spacing.
  const double min_normal = std::ldexp(1.0, 1 - f.bias);
  int q;
  if (a < min_normal) {
    q = 1 - f.bias - f.mantissa_bits;
  } else {
    int e;
    std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
    q = e - 1 - f.mantissa_bits;
  }
  const double scaled = std::ldexp(a, -q);  // exact, below 2^(M+1)
  const double below = std::floor(scaled);
  const double rest = scaled - below;
  const bool below_is_odd = std::fmod(below, 2.0) == 1.0;
  const double units = below + ((rest > 0.5 || (rest == 0.5 && below_is_odd)) ? 1.0 : 0.0);
  const double v = std::ldexp(units, q);

  if (v > max_finite) return sign | ref_infinity_code(f);  // only reachable without saturation
  if (v < min_normal) return sign | static_cast<uint32_t>(units);
  int e;
  const double m = std::frexp(v, &e);
  const auto exponent = static_cast<uint32_t>(e - 1 + f.bias);
  const auto mantissa =
      static_cast<uint32_t>(std::ldexp(m, f.mantissa_bits + 1) - std::ldexp(1.0, f.mantissa_bits));
  return sign | (exponent << f.mantissa_bits) | mantissa;
}

}  // namespace shardload::testing
