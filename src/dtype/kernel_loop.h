#pragma once

// The element loop of every bulk conversion, as templates over the source and destination formats.
// Only kernels.cc includes this: it instantiates the loops inside functions compiled for several
// instruction sets, so everything here must be inlined into them (hence always_inline). kSelect is
// the select style that vectorizes on the instruction set at hand (see codec.h).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dtype/codec.h"
#include "dtype/float_format.h"

namespace shardload::dtype_internal {

template <typename Format>
struct StorageOf {
  using Type = typename Format::Storage;
};
template <>
struct StorageOf<float> {
  using Type = float;
};
template <>
struct StorageOf<double> {
  using Type = double;
};

template <typename Format>
using Storage = typename StorageOf<Format>::Type;

template <typename Format>
inline constexpr bool kIsWide = std::is_same_v<Format, float> || std::is_same_v<Format, double>;

// Every value of Format is a bf16 value (e4m3 and e5m2 are), so its float32 decoding converts to
// bf16 by truncation; decode() already quiets NaN, so this equals f32_to_bf16(decode(x)) bit for
// bit.
template <typename Format>
inline constexpr bool kExactInBf16 =
    std::is_same_v<Format, F8E4M3> || std::is_same_v<Format, F8E5M2>;

// One element, Src storage to Dst storage. Narrow sources go through float32, which holds them
// exactly; double sources round straight to the destination.
template <typename Src, typename Dst, Select kSelect>
[[gnu::always_inline]] inline Storage<Dst> convert_one(Storage<Src> x) {
  if constexpr (std::is_same_v<Src, Dst>) {
    return x;
  } else if constexpr (kIsWide<Src> && kIsWide<Dst>) {
    return static_cast<Dst>(x);
  } else if constexpr (kIsWide<Src>) {
    return encode<Dst, kSelect>(x);
  } else if constexpr (std::is_same_v<Dst, float>) {
    return decode<Src, kSelect>(x);
  } else if constexpr (std::is_same_v<Dst, double>) {
    return static_cast<double>(decode<Src, kSelect>(x));
  } else if constexpr (std::is_same_v<Dst, Bf16> && kExactInBf16<Src>) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(decode<Src, kSelect>(x)) >> 16);
  } else {
    return encode<Dst, kSelect>(decode<Src, kSelect>(x));
  }
}

// Byte pointers and memcpy loads/stores: tensors in a checkpoint need not be aligned to their
// element size, and compilers turn these into plain (unaligned) vector loads.
template <typename Src, typename Dst, Select kSelect>
[[gnu::always_inline]] inline void convert_loop(const std::byte* __restrict src,
                                                std::byte* __restrict dst, size_t n) {
  using In = Storage<Src>;
  using Out = Storage<Dst>;
  for (size_t i = 0; i < n; ++i) {
    In x;
    std::memcpy(&x, src + i * sizeof(In), sizeof(In));
    const Out y = convert_one<Src, Dst, kSelect>(x);
    std::memcpy(dst + i * sizeof(Out), &y, sizeof(Out));
  }
}

// bf16 to an 8-bit format, two elements at a time: a 32-bit load holds two bf16 values whose
// float32 bits are a shift and a mask away, and the two codes form one 16-bit store. This keeps the
// vector code in 32-bit lanes without widening or narrowing shuffles, the costly part of the plain
// loop.
template <typename Dst, Select kSelect>
[[gnu::always_inline]] inline void convert_bf16_pairs(const std::byte* __restrict src,
                                                      std::byte* __restrict dst, size_t n) {
  static_assert(sizeof(typename Dst::Storage) == 1);
  static_assert(std::endian::native == std::endian::little, "the first element is the low half");
  for (size_t i = 0; i + 2 <= n; i += 2) {
    uint32_t pair;
    std::memcpy(&pair, src + 2 * i, 4);
    const uint32_t low = encode_magnitude<Dst, float, kSelect>((pair << 16) & 0x7FFFFFFFu);
    const uint32_t high = encode_magnitude<Dst, float, kSelect>(pair & 0x7FFF0000u);
    // The bf16 sign bits sit at bits 15 and 31; the codes' at 7 and 15.
    const uint32_t signs = ((pair >> 8) & 0x80u) | ((pair >> 16) & 0x8000u);
    const auto codes = static_cast<uint16_t>(low | (high << 8) | signs);
    std::memcpy(dst + i, &codes, 2);
  }
  if (n % 2 != 0) {
    uint16_t last;
    std::memcpy(&last, src + 2 * (n - 1), 2);
    const auto code = static_cast<uint8_t>(encode<Dst, kSelect>(decode<Bf16, kSelect>(last)));
    std::memcpy(dst + n - 1, &code, 1);
  }
}

// The conversion of n elements: the pair loop where it applies, else the plain one.
template <typename Src, typename Dst, Select kSelect>
[[gnu::always_inline]] inline void convert_any(const std::byte* __restrict src,
                                               std::byte* __restrict dst, size_t n) {
  if constexpr (std::is_same_v<Src, Bf16> && !kIsWide<Dst> && sizeof(Storage<Dst>) == 1) {
    convert_bf16_pairs<Dst, kSelect>(src, dst, n);
  } else {
    convert_loop<Src, Dst, kSelect>(src, dst, n);
  }
}

}  // namespace shardload::dtype_internal
