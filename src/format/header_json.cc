#include "format/header_json.h"

#include <algorithm>
#include <numeric>

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
  index_tensor_names(header);  // names are unique: the handler refuses a repeated one
  return header;
}

bool index_tensor_names(SafetensorsHeader& header) {
  const std::vector<TensorInfo>& tensors = header.tensors;
  std::vector<uint32_t>& order = header.by_name_;
  order.resize(tensors.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  const auto by_name = [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; };
  // Writers often list tensors by name already (the crate: by dtype alignment, then name).
  if (!std::is_sorted(order.begin(), order.end(), by_name)) {
    std::sort(order.begin(), order.end(), by_name);
  }
  const auto same_name = [&](uint32_t a, uint32_t b) { return tensors[a].name == tensors[b].name; };
  return std::adjacent_find(order.begin(), order.end(), same_name) == order.end();
}

}  // namespace shardload::format
