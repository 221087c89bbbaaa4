// The common case of a header, read with simdjson's DOM parser: a valid document of tensor entries
// and string metadata. It declines (nullopt) whenever the text is anything else, so that the event
// parser (header_json.cc) decides, with its messages, what is wrong. A 6.7k-tensor header took
// 10-16 ms through the events and 1.5-2.2 ms here (measured 2026-12-01).
#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

#include "format/header_json.h"
#include "shardload/dtype.h"
#include "shardload/safetensors.h"

namespace shardload::format {

namespace {

namespace dom = simdjson::dom;

// A safetensors header nests three levels (header, entry, shape); anything deeper declines.
constexpr size_t kFastMaxDepth = 4;

// The event parser takes a value as unsigned only when its text is a non-negative integer; simdjson
// reads "-0" as the integer 0, so texts holding "-0" decline (see accepts_text).
bool read_unsigned(dom::element value, uint64_t& out) {
  switch (value.type()) {
    case dom::element_type::UINT64:
      out = value.get_uint64().value_unsafe();
      return true;
    case dom::element_type::INT64: {
      const int64_t signed_value = value.get_int64().value_unsafe();
      if (signed_value < 0) return false;
      out = static_cast<uint64_t>(signed_value);
      return true;
    }
    default:
      return false;
  }
}

bool read_shape(dom::element value, Shape& shape) {
  dom::array dims;
  if (value.get_array().get(dims) != simdjson::SUCCESS) return false;
  shape.reserve(dims.size());
  for (dom::element dim : dims) {
    uint64_t size = 0;
    if (!read_unsigned(dim, size)) return false;
    shape.push_back(size);
  }
  return true;
}

bool read_offsets(dom::element value, TensorInfo& tensor) {
  dom::array offsets;
  if (value.get_array().get(offsets) != simdjson::SUCCESS || offsets.size() != 2) return false;
  auto it = offsets.begin();
  return read_unsigned(*it, tensor.begin) && read_unsigned(*++it, tensor.end);
}

// The dtype named `text`; the last name read is compared first, as a header's tensors mostly share
// one dtype (parse_dtype compares against every dtype's name in turn).
struct DTypeReader {
  std::string_view last_text;
  DType last = DType::kU8;

  std::optional<DType> read(std::string_view text) {
    if (text == last_text && !text.empty()) return last;
    const std::optional<DType> parsed = parse_dtype(text);
    if (parsed) {
      last_text = text;
      last = *parsed;
    }
    return parsed;
  }
};

// Fills one entry; false when it is not an object with exactly one each of a known dtype, a shape
// and two offsets (other fields may hold scalars, which the crate ignores).
bool read_tensor(dom::element value, TensorInfo& tensor, DTypeReader& dtypes) {
  dom::object fields;
  if (value.get_object().get(fields) != simdjson::SUCCESS) return false;
  bool dtype = false, shape = false, offsets = false;
  for (dom::key_value_pair field : fields) {
    if (field.key == "dtype") {
      std::string_view name;
      if (dtype || field.value.get_string().get(name) != simdjson::SUCCESS) return false;
      const std::optional<DType> parsed = dtypes.read(name);
      if (!parsed) return false;
      tensor.dtype = *parsed;
      dtype = true;
    } else if (field.key == "shape") {
      if (shape || !read_shape(field.value, tensor.shape)) return false;
      shape = true;
    } else if (field.key == "data_offsets") {
      if (offsets || !read_offsets(field.value, tensor)) return false;
      offsets = true;
    } else if (field.value.is_array() || field.value.is_object()) {
      return false;
    }
  }
  return dtype && shape && offsets;
}

bool read_metadata(dom::element value, std::map<std::string, std::string>& metadata) {
  if (value.is_null()) return true;  // the crate reads null as no metadata
  dom::object entries;
  if (value.get_object().get(entries) != simdjson::SUCCESS) return false;
  for (dom::key_value_pair entry : entries) {
    std::string_view text;
    if (entry.value.get_string().get(text) != simdjson::SUCCESS) return false;
    if (!metadata.try_emplace(std::string(entry.key), text).second) return false;
  }
  return true;
}

// Texts the two parsers could read differently decline before parsing: "-0" (see read_unsigned)
// and escapes, whose rules (lone surrogates, \u0000) the event parser owns.
bool accepts_text(std::string_view json) {
  return json.find('\\') == std::string_view::npos && json.find("-0") == std::string_view::npos;
}

}  // namespace

std::optional<SafetensorsHeader> parse_header_json_fast(std::string_view json) {
  if (!accepts_text(json)) return std::nullopt;
  // One parser per thread keeps its buffers from header to header (shards are read in parallel).
  thread_local dom::parser parser(kMaxHeaderBytes);
  thread_local const bool sized = parser.allocate(0, kFastMaxDepth) == simdjson::SUCCESS;
  dom::element root;
  if (!sized || parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) return std::nullopt;

  SafetensorsHeader header;
  header.tensors.reserve(top.size());
  bool seen_metadata = false;
  DTypeReader dtypes;
  for (dom::key_value_pair member : top) {
    if (member.key == kMetadataKey) {
      if (seen_metadata || !read_metadata(member.value, header.metadata)) return std::nullopt;
      seen_metadata = true;
      continue;
    }
    TensorInfo& tensor = header.tensors.emplace_back();
    if (!read_tensor(member.value, tensor, dtypes)) return std::nullopt;
    tensor.name = member.key;
  }
  if (!index_tensor_names(header)) return std::nullopt;  // a repeated name: the events report it
  return header;
}

}  // namespace shardload::format
