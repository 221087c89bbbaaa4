#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "shardload/safetensors.h"

namespace shardload::format {

inline constexpr std::string_view kMetadataKey = "__metadata__";

// Parses the JSON text of a header. Checks JSON syntax first (as the crate, which reads the whole
// document before interpreting it), then the structure of every entry: tensor entries are objects
// with a known dtype, a shape of non-negative integers and two integer data_offsets (other fields
// are ignored, as the crate does); no name appears twice; __metadata__ is null or a
// string-to-string map. Returns tensors in document order, with by_name_ ordering them by name.
// Offsets and sizes are left to the caller. Throws Error.
// Fast for the common case (parse_header_json_fast), the event parser for everything else.
SafetensorsHeader parse_header_json(std::string_view json, std::string_view file);

// The same result as parse_header_json for a header whose text is plain (no escapes, no "-0") and
// valid, read with simdjson's DOM; nullopt for every other text, valid or not.
std::optional<SafetensorsHeader> parse_header_json_fast(std::string_view json);

// Fills header.by_name_ (positions of header.tensors, ordered by name); false when a name repeats.
bool index_tensor_names(SafetensorsHeader& header);

// parse_header_json through nlohmann's SAX events alone: the reference for every text, and the one
// that says what is wrong.
SafetensorsHeader parse_header_json_events(std::string_view json, std::string_view file);

// How many bytes of a string or number literal taken from the file an error message shows.
inline constexpr size_t kQuoteBytes = 64;

// What an error message shows of a string taken from the file: quoted, cut to kQuoteBytes.
std::string quote_for_message(std::string_view text);

}  // namespace shardload::format
