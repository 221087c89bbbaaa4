#include "format/utf8.h"

#include <cstdint>
#include <cstring>

namespace shardload::format {

namespace {

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Length of the well-formed sequence starting at text[i], or 0 when it is malformed or truncated.
size_t sequence_length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = at(i);
  const size_t left = text.size() - i;
  // The second byte carries the range restrictions that rule out overlongs, surrogates and >
  // U+10FFFF.
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (left < length) return 0;
  if (at(i + 1) < low || at(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (!is_continuation(at(i + k))) return 0;
  }
  return length;
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  size_t i = 0;
  while (i < text.size()) {
    // Headers are almost all ASCII: skip it eight bytes at a time.
    if (text.size() - i >= 8) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, sizeof(word));
      if ((word & kHighBits) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t length = sequence_length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace shardload::format
