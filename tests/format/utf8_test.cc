// The header's UTF-8 check against an independent reading of the Unicode definition.
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "format/utf8.h"

namespace shardload::format {
namespace {

// Reference: decode by the definition (bit patterns, then the code point's range) rather than by
// byte tables.
bool reference_valid(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t lead = static_cast<uint8_t>(s[i]);
    size_t length = 0;
    uint32_t cp = 0;
    if (lead < 0x80) {
      length = 1, cp = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, cp = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, cp = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, cp = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > s.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      const uint8_t byte = static_cast<uint8_t>(s[i + k]);
      if ((byte & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (byte & 0x3F);
    }
    static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinimum[length] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

TEST(Utf8, AgreesWithTheDefinitionOnEveryShortSequence) {
  // Every 1- and 2-byte string, every 3-byte string behind a 3- or 4-byte lead, and 4-byte strings
  // with the last byte fixed or the first three fixed: about three million, each also inside ASCII
  // runs long enough for the eight-bytes-at-a-time path.
  size_t checked = 0;
  std::string s;
  const auto check = [&](const std::string& text) {
    const bool valid = !find_invalid_utf8(text).has_value();
    const bool padded_valid = !find_invalid_utf8("01234567" + text + "89abcdef").has_value();
    if (valid != reference_valid(text) || padded_valid != valid) {
      std::string hex;
      for (char c : text) hex += std::to_string(static_cast<uint8_t>(c)) + " ";
      ADD_FAILURE() << "disagree on " << hex;
      return false;
    }
    ++checked;
    return true;
  };
  for (int a = 0; a < 256; ++a) {
    if (!check(std::string(1, static_cast<char>(a)))) return;
    for (int b = 0; b < 256; ++b) {
      s = {static_cast<char>(a), static_cast<char>(b)};
      if (!check(s)) return;
      if (a < 0xE0) continue;  // longer strings only matter behind a 3- or 4-byte lead
      for (int c = 0; c < 256; ++c) {
        s = {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)};
        if (!check(s)) return;
        if (a >= 0xF0 && !check(s + "\x80")) return;
      }
    }
  }
  for (int d = 0; d < 256; ++d) {
    if (!check(std::string("\xF0\x90\x80", 3) + static_cast<char>(d))) return;
    if (!check(std::string("\xF4\x8F\xBF", 3) + static_cast<char>(d))) return;
  }
  EXPECT_GT(checked, 1'000'000u);
}

TEST(Utf8, ReportsTheOffsetOfTheFirstBadByte) {
  EXPECT_EQ(find_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("plain ascii, longer than eight bytes"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("0123456789\xFF"), std::optional<size_t>(10));
  EXPECT_EQ(find_invalid_utf8("01234567\xC3\xA9\xE2\x82"),
            std::optional<size_t>(10));  // é, then cut short
  EXPECT_EQ(find_invalid_utf8("\xF0\x9F\x98\x80 ok \xED\xBF\xBF"), std::optional<size_t>(8));
  EXPECT_EQ(find_invalid_utf8(std::string("abc\0def", 7)),
            std::nullopt);  // NUL is UTF-8 (JSON rejects it)
}

}  // namespace
}  // namespace shardload::format
