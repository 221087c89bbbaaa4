#include "format/header_writer.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "format/header_json.h"
#include "format/utf8.h"
#include "shardload/error.h"

namespace shardload::format {

namespace {

// Rank of a dtype in the crate's Dtype enum, which is declared in order of increasing alignment;
// the crate writes the most aligned tensors first so that every tensor's data lands aligned to its
// element size.
int alignment_rank(DType dtype) {
  switch (dtype) {
    case DType::kBool: return 0;
    case DType::kF4: return 1;
    case DType::kF6E2M3: return 2;
    case DType::kF6E3M2: return 3;
    case DType::kU8: return 4;
    case DType::kI8: return 5;
    case DType::kF8E5M2: return 6;
    case DType::kF8E4M3: return 7;
    case DType::kF8E8M0: return 8;
    case DType::kF8E4M3FNUZ: return 9;
    case DType::kF8E5M2FNUZ: return 10;
    case DType::kI16: return 11;
    case DType::kU16: return 12;
    case DType::kF16: return 13;
    case DType::kBF16: return 14;
    case DType::kI32: return 15;
    case DType::kU32: return 16;
    case DType::kF32: return 17;
    case DType::kC64: return 18;
    case DType::kF64: return 19;
    case DType::kI64: return 20;
    case DType::kU64: return 21;
  }
  return 0;
}

// JSON string escaping as serde_json does it: quote, backslash and control characters only,
// "\u00xx" in lower-case hex for the controls without a short form; everything else (including
// non-ASCII) verbatim.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void check_utf8(std::string_view text, ErrorDetails details) {
  if (!find_invalid_utf8(text)) return;
  details.found = quote_for_message(text);
  throw Error(ErrorKind::kInvalidArgument, "not valid UTF-8", std::move(details));
}

uint64_t checked_nbytes(const TensorToWrite& tensor) {
  try {
    return shape_nbytes(tensor.shape, tensor.dtype);
  } catch (const Error& error) {
    throw Error(ErrorKind::kInvalidArgument, error.message(),
                {.tensor = tensor.name, .field = "shape", .found = error.found()});
  }
}

// Checks every tensor and returns its data length: data.size(), which must be shape x dtype; or,
// for a sparse file, shape x dtype with no data given.
std::vector<uint64_t> check_tensors(const std::vector<TensorToWrite>& tensors, bool sparse) {
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (const TensorToWrite& tensor : tensors) {
    check_utf8(tensor.name, {.field = "name"});
    if (tensor.name == kMetadataKey) {
      throw Error(ErrorKind::kInvalidArgument, "a tensor cannot be named __metadata__",
                  {.tensor = tensor.name, .field = "name"});
    }
    if (!names.insert(tensor.name).second) {
      throw Error(ErrorKind::kInvalidArgument, "tensor name given twice",
                  {.tensor = tensor.name, .field = "name"});
    }
    const uint64_t nbytes = checked_nbytes(tensor);
    if (tensor.data.size() != (sparse ? 0 : nbytes)) {
      throw Error(
          ErrorKind::kInvalidArgument,
          sparse ? "a sparse file takes no data" : "data length does not match shape x dtype",
          {.tensor = tensor.name,
           .field = "data",
           .expected = fmt::format("{} bytes", sparse ? 0 : nbytes),
           .found = fmt::format("{} bytes", tensor.data.size())});
    }
    sizes.push_back(nbytes);
  }
  return sizes;
}

}  // namespace

WriteLayout layout_safetensors(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata, bool sparse) {
  const std::vector<uint64_t> sizes = check_tensors(tensors, sparse);
  for (const auto& [key, value] : metadata) {
    check_utf8(key, {.field = std::string(kMetadataKey)});
    check_utf8(value, {.field = std::string(kMetadataKey)});
  }

  WriteLayout layout;
  layout.order.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) layout.order[i] = i;
  std::sort(layout.order.begin(), layout.order.end(), [&](size_t a, size_t b) {
    const int rank_a = alignment_rank(tensors[a].dtype);
    const int rank_b = alignment_rank(tensors[b].dtype);
    if (rank_a != rank_b) return rank_a > rank_b;
    return tensors[a].name < tensors[b].name;
  });

  std::string& out = layout.header;
  out += '{';
  if (!metadata.empty()) {
    append_json_string(out, kMetadataKey);
    out += ":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += '}';
  }
  for (size_t position : layout.order) {
    const TensorToWrite& tensor = tensors[position];
    const uint64_t begin = layout.data_bytes;
    if (__builtin_add_overflow(begin, sizes[position], &layout.data_bytes)) {
      throw Error(ErrorKind::kInvalidArgument, "total data size overflows 64 bits",
                  {.tensor = tensor.name});
    }
    if (out.size() > 1) out += ',';
    append_json_string(out, tensor.name);
    fmt::format_to(
        std::back_inserter(out), ":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
        dtype_name(tensor.dtype), fmt::join(tensor.shape, ","), begin, layout.data_bytes);
  }
  out += '}';
  // Padding keeps the data section 8-byte aligned in the file; with the order above, every tensor
  // then starts at a multiple of its element size.
  out.resize((out.size() + 7) / 8 * 8, ' ');
  if (out.size() > kMaxHeaderBytes) {
    throw Error(ErrorKind::kHeaderTooLarge, "serialised header is above the 100,000,000-byte cap",
                {.field = "header_length",
                 .expected = fmt::format("at most {}", kMaxHeaderBytes),
                 .found = fmt::format("{}", out.size())});
  }
  return layout;
}

}  // namespace shardload::format

namespace shardload {

std::string serialize_safetensors_header(const std::vector<TensorToWrite>& tensors,
                                         const std::map<std::string, std::string>& metadata) {
  return format::layout_safetensors(tensors, metadata).header;
}

}  // namespace shardload
