#include "core/byte_size.h"

#include <cctype>
#include <charconv>

#include "shardload/error.h"

namespace shardload {

uint64_t parse_byte_size(const std::string& text, std::string_view flag) {
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [rest, ec] = std::from_chars(begin, end, value);
  int shift = 0;
  if (ec == std::errc() && rest != end && rest + 1 == end) {
    switch (std::toupper(static_cast<unsigned char>(*rest))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: shift = -1;
    }
    ++rest;
  }
  if (ec != std::errc() || rest != end || shift < 0 || value == 0 ||
      value > (~uint64_t{0} >> shift)) {
    throw Error(ErrorKind::kInvalidArgument, "not a positive byte size",
                {.field = std::string(flag),
                 .expected = "bytes with an optional K, M, G or T suffix",
                 .found = text});
  }
  return value << shift;
}

}  // namespace shardload
