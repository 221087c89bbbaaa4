#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// A command-line helper both programs share (shardload export --max-file-size, shardload-serve
// --staging-bytes); in core so that neither links a module for it.
namespace shardload {

// Parses "5G", "512M", "100K", "4096" (powers of 1024). Throws Error(kInvalidArgument) naming
// `flag`, the option the text came from (empty: none is named).
uint64_t parse_byte_size(const std::string& text, std::string_view flag = {});

}  // namespace shardload
