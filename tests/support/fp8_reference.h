#pragma once

// A float64 reference for e4m3fn, written from docs/fp8.md apart from the library's
// converter: tests compare FP8 results code by code and accept at most one code of difference from
// it.

#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace shardload::testing {

// The value of an e4m3fn code, from its bit fields (NaN codes are not asked for).
inline double fp8_value(uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 7;
  const double magnitude =
      e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (code & 0x80) != 0 ? -magnitude : magnitude;
}

// Nearest e4m3fn code to x (saturating at 448; ties to the even code).
inline uint8_t fp8_reference(double x) {
  const uint8_t sign = x < 0 ? 0x80 : 0;
  const double a = std::fabs(x);
  uint8_t best = 0;
  for (uint8_t c = 1; c <= 126; ++c) {
    const double d = std::fabs(fp8_value(c) - a);
    const double b = std::fabs(fp8_value(best) - a);
    if (d < b || (d == b && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(sign | best);
}

// Codes are ordered by magnitude within a sign, so one step is one code; +0 and -0 are one value.
inline bool within_one_code(uint8_t got, uint8_t want) {
  if ((want & 0x7F) == 0) return (got & 0x7F) <= 1;
  return (got & 0x80) == (want & 0x80) && std::abs(int(got & 0x7F) - int(want & 0x7F)) <= 1;
}

}  // namespace shardload::testing
