#pragma once

#include <cstddef>
#include <string_view>

namespace shardload {

// The longest prefix of `text` of at most max_bytes that does not end inside a UTF-8 sequence, for
// error messages that quote part of a value (a message may become JSON: it must stay valid text).
inline std::string_view cut_utf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

}  // namespace shardload
