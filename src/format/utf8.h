#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace shardload::format {

// Offset of the first byte that does not belong to a well-formed UTF-8 sequence (Unicode table 3-7,
// the rules Rust's str::from_utf8 applies: no overlong forms, no surrogates, nothing above
// U+10FFFF), or nullopt when the whole text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

}  // namespace shardload::format
