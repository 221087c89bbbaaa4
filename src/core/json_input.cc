#include "core/json_input.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/utf8_cut.h"

namespace shardload {
namespace {

// "line 3, column 7" of a byte offset, counted the way editors do (1-based).
std::string position_of(std::string_view text, uint64_t byte) {
  uint64_t line = 1;
  uint64_t column = 1;
  const uint64_t end = std::min<uint64_t>(byte, text.size());
  for (uint64_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {} (byte {})", line, column, byte);
}

// nlohmann's message quotes the token it stopped at ("...; last read: 'root:$6$...'"): only the
// part before that quote, which is the parser's own words, is kept.
std::string parser_words(const nlohmann::json::parse_error& error) {
  std::string_view what = error.what();
  if (const size_t colon = what.find(": "); colon != std::string_view::npos) {
    what.remove_prefix(colon + 2);  // drops "[json.exception.parse_error.101] parse error at ..."
  }
  if (const size_t quote = what.find("; last read:"); quote != std::string_view::npos) {
    what = what.substr(0, quote);
  }
  return std::string(what);
}

}  // namespace

void check_json_depth(std::string_view text, int max_depth, ErrorKind kind,
                      const std::string& source) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw Error(kind, "JSON nested too deeply",
                    {.file = source,
                     .expected = fmt::format("at most {} levels of arrays and objects", max_depth),
                     .found = fmt::format("level {} at {}", depth, position_of(text, i))});
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, ErrorKind kind, const std::string& source,
                          const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw Error(kind, "JSON text too large",
                {.file = source,
                 .expected = fmt::format("at most {} bytes", limits.max_bytes),
                 .found = fmt::format("{} bytes", text.size())});
  }
  check_json_depth(text, limits.max_depth, kind, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(kind, "invalid JSON",
                {.file = source,
                 .expected = "JSON text",
                 .found = fmt::format("{} at {}", parser_words(e), position_of(text, e.byte))});
  } catch (const nlohmann::json::exception& e) {
    // Not a syntax error (e.g. an invalid UTF-8 sequence reported by type): the id is enough.
    throw Error(kind, "invalid JSON", {.file = source, .found = fmt::format("error {}", e.id)});
  }
}

std::string read_bounded_file(const std::string& path, ErrorKind kind, uint64_t max_bytes,
                              std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw Error(kind, fmt::format("cannot open {}: {}", what, std::strerror(errno)),
                {.file = path});
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  return read_bounded_fd(fd, path, kind, max_bytes, what);
}

std::string read_bounded_fd(int fd, const std::string& path, ErrorKind kind, uint64_t max_bytes,
                            std::string_view what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw Error(kind, fmt::format("cannot stat {}: {}", what, std::strerror(errno)),
                {.file = path});
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(kind,
                fmt::format("cannot read {}: {}", what,
                            S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file"),
                {.file = path, .expected = "a regular file"});
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw Error(kind, fmt::format("{} too large", what),
                {.file = path,
                 .expected = fmt::format("at most {} bytes", max_bytes),
                 .found = fmt::format("{} bytes", st.st_size)});
  }
  // Read to the end, not to the size fstat gave: a file that grew meanwhile is seen whole (or too
  // large), never cut.
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t done = 0;
  for (;;) {
    if (done == text.size()) text.resize(std::min<uint64_t>(text.size() * 2, max_bytes + 1));
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(kind, fmt::format("cannot read {}: {}", what, std::strerror(errno)),
                  {.file = path});
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
    if (done > max_bytes) {
      throw Error(kind, fmt::format("{} too large", what),
                  {.file = path,
                   .expected = fmt::format("at most {} bytes", max_bytes),
                   .found = "more, once it had grown while it was read"});
    }
  }
  text.resize(done);
  return text;
}

std::string brief_json(const nlohmann::json& value, size_t max_bytes) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_bytes) {
    text.resize(cut_utf8(text, max_bytes).size());
    text += "...";
  }
  return text;
}

nlohmann::json read_json_file(const std::string& path, ErrorKind kind, const JsonLimits& limits,
                              std::string_view what) {
  return parse_json(read_bounded_file(path, kind, limits.max_bytes, what), kind, path, limits);
}

}  // namespace shardload
