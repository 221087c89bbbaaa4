#include "format/header_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "format/header_handler.h"
#include "shardload/error.h"

namespace shardload::format {

SafetensorsHeader parse_header_json(std::string_view json, std::string_view file) {
  std::optional<SafetensorsHeader> header = parse_header_json_fast(json);
  return header ? *std::move(header) : parse_header_json_events(json, file);
}

SafetensorsHeader parse_header_json_events(std::string_view json, std::string_view file) {
  // nlohmann's lexer takes a NUL byte for the end of the input and would accept "{}\0garbage"; JSON
  // has no place for a raw NUL, inside strings or out.
  if (const size_t nul = json.find('\0'); nul != std::string_view::npos) {
    throw Error(ErrorKind::kHeaderJson, "header is not valid JSON: raw NUL byte",
                {.file = std::string(file),
                 .field = "header",
                 .found = fmt::format("NUL at header byte {}", nul)});
  }
  // nlohmann also skips a leading byte-order mark, which serde_json (and so the crate) refuses.
  if (json.starts_with("\xEF\xBB\xBF")) {
    throw Error(
        ErrorKind::kHeaderJson, "header is not valid JSON: byte-order mark",
        {.file = std::string(file), .field = "header", .found = "EF BB BF at header byte 0"});
  }
  SafetensorsHeader header;
  HeaderHandler handler(file, header);
  nlohmann::json::sax_parse(json.data(), json.data() + json.size(), &handler);
  handler.throw_if_failed();
  return header;
}

}  // namespace shardload::format
