#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "shardload/error.h"

namespace shardload {

// Bounds on JSON that crosses a trust boundary (files named by a user or a request, request bodies,
// shared memory). Real inputs nest 2-6 levels; 64 leaves room and keeps every recursive walk of a
// parsed value (copy, dump, comparison) far from the stack's end.
struct JsonLimits {
  uint64_t max_bytes = 0;
  int max_depth = 64;
};

inline constexpr JsonLimits kConfigJsonLimits{.max_bytes = uint64_t{16} << 20};
// Indexes, manifests, expert maps and load statistics of the largest models (tens of thousands of
// tensors, hundreds of ranks) stay far below this.
inline constexpr JsonLimits kDataJsonLimits{.max_bytes = uint64_t{256} << 20};
inline constexpr JsonLimits kRequestJsonLimits{.max_bytes = uint64_t{64} << 20};

// Parses `text` after checking its size and nesting depth (an iterative scan, so depth itself can
// never overflow the stack). Throws Error(kind) with file = `source`: the message gives the
// position and the kind of problem, never the text, which may be the bytes of a file that is not
// JSON at all.
nlohmann::json parse_json(std::string_view text, ErrorKind kind, const std::string& source,
                          const JsonLimits& limits);

// The whole of a regular file, at most max_bytes. Throws Error(kind) naming the file when it cannot
// be opened, is not a regular file (a FIFO would block the reader forever) or is larger.
// `what` names the file in messages ("cannot open expert map: ...").
std::string read_bounded_file(const std::string& path, ErrorKind kind, uint64_t max_bytes,
                              std::string_view what = "file");

// read_bounded_file of a file the caller opened its own way (relative to a directory fd, with
// O_NOFOLLOW and ownership checks; O_NONBLOCK so that a FIFO cannot block the open): the same
// checks and the same bounded read, the one read path both use. `path` names the file in messages;
// fd stays open.
std::string read_bounded_fd(int fd, const std::string& path, ErrorKind kind, uint64_t max_bytes,
                            std::string_view what = "file");

// read_bounded_file, then parse_json.
nlohmann::json read_json_file(const std::string& path, ErrorKind kind, const JsonLimits& limits,
                              std::string_view what = "file");

// How much of a parsed value an error message quotes by default: enough to recognise it, never a
// whole document.
inline constexpr size_t kBriefJsonBytes = 40;

// A parsed value for an error message: its JSON text, cut to max_bytes ("..." marks the cut).
std::string brief_json(const nlohmann::json& value, size_t max_bytes = kBriefJsonBytes);

// Throws Error(kind) when `text` nests arrays and objects deeper than max_depth. Ignores brackets
// inside strings; does not otherwise validate.
void check_json_depth(std::string_view text, int max_depth, ErrorKind kind,
                      const std::string& source);

}  // namespace shardload
