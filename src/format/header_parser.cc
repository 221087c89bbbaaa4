#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "core/shape_text.h"
#include "format/header_json.h"
#include "format/length_prefix.h"
#include "format/utf8.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {

namespace {

using format::kLengthBytes;

std::string offsets_string(uint64_t begin, uint64_t end) {
  return fmt::format("[{}, {}]", begin, end);
}

// Bytes the shape and dtype call for, checked the way the crate checks them: element count, then
// bits, each without overflow (a zero dimension after an overflowing prefix still overflows), whole
// bytes only.
uint64_t expected_bytes(const TensorInfo& tensor, std::string_view file) {
  uint64_t numel = 1;
  uint64_t bits = 0;
  bool overflow = false;
  for (uint64_t dim : tensor.shape) {
    overflow = __builtin_mul_overflow(numel, dim, &numel);
    if (overflow) break;
  }
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t{dtype_bits(tensor.dtype)}, &bits);
  if (overflow) {
    throw Error(ErrorKind::kShapeOverflow,
                fmt::format("size of shape x {} overflows 64 bits", dtype_name(tensor.dtype)),
                {.file = std::string(file),
                 .tensor = tensor.name,
                 .field = "shape",
                 .found = shape_text(tensor.shape)});
  }
  if (bits % 8 != 0) {
    throw Error(
        ErrorKind::kSizeMismatch,
        fmt::format("{} elements of {} do not fill whole bytes", numel, dtype_name(tensor.dtype)),
        {.file = std::string(file),
         .tensor = tensor.name,
         .field = "shape",
         .expected = "a multiple of 8 bits",
         .found = fmt::format("{} bits", bits)});
  }
  return bits / 8;
}

// "a + b" when the sum does not fit: messages about corrupt files must not wrap around.
std::string sum_string(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return fmt::format("{} + {}", a, b);
  return fmt::format("{}", sum);
}

std::string offsets_spanning(uint64_t begin, uint64_t bytes) {
  return fmt::format("[{}, {}]", begin, sum_string(begin, bytes));
}

// What data_offsets should have been, for the message: the begin that continues the data section
// and, when the shape allows it, the matching end.
std::string expected_offsets(const TensorInfo& tensor, uint64_t begin, std::string_view file) {
  try {
    return offsets_spanning(begin, expected_bytes(tensor, file));
  } catch (const Error&) {
    // The shape is bad too; this error is about the offsets, the shape's turn comes later.
    return fmt::format("[{}, ...]", begin);
  }
}

// Offsets must tile [0, data end) in order, each tensor exactly as long as its shape and dtype say.
uint64_t validate_offsets(const std::vector<TensorInfo>& tensors, std::string_view file) {
  uint64_t next = 0;
  for (const TensorInfo& tensor : tensors) {
    if (tensor.begin != next || tensor.end < tensor.begin) {
      const char* what = tensor.end < tensor.begin ? "end is before begin"
                         : next == 0               ? "the first tensor must start at 0"
                         : tensor.begin > next     ? "gap after the previous tensor"
                                                   : "overlaps the previous tensor";
      throw Error(ErrorKind::kInvalidOffsets, what,
                  {.file = std::string(file),
                   .tensor = tensor.name,
                   .field = "data_offsets",
                   .expected = expected_offsets(tensor, next, file),
                   .found = offsets_string(tensor.begin, tensor.end)});
    }
    const uint64_t bytes = expected_bytes(tensor, file);
    if (tensor.nbytes() != bytes) {
      throw Error(ErrorKind::kSizeMismatch,
                  fmt::format("length does not match shape {} x {}", shape_text(tensor.shape),
                              dtype_name(tensor.dtype)),
                  {.file = std::string(file),
                   .tensor = tensor.name,
                   .field = "data_offsets",
                   .expected = offsets_spanning(tensor.begin, bytes),
                   .found = offsets_string(tensor.begin, tensor.end)});
    }
    next = tensor.end;
  }
  return next;
}

}  // namespace

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [&](uint32_t i, std::string_view n) { return tensors[i].name < n; });
  return it != by_name_.end() && tensors[*it].name == name ? &tensors[*it] : nullptr;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> prefix, uint64_t file_size,
                                           std::string_view file) {
  const std::string file_name(file);
  // A prefix can never hold more than the file does.
  if (prefix.size() > file_size) prefix = prefix.first(file_size);
  if (file_size < kLengthBytes) {
    throw Error(ErrorKind::kHeaderTooSmall, "file is shorter than the 8-byte header length",
                {.file = file_name,
                 .field = "header_length",
                 .expected = "at least 8 bytes",
                 .found = fmt::format("{} bytes", file_size)});
  }
  if (prefix.size() < kLengthBytes) {
    throw Error(ErrorKind::kHeaderLength, "the header length was not read",
                {.file = file_name,
                 .field = "header_length",
                 .found = fmt::format("{} bytes", prefix.size())});
  }
  const uint64_t n = format::load_length(prefix.data());
  if (n > kMaxHeaderBytes) {
    // The length is the file's first 8 bytes: a file that is not safetensors at all (a link to
    // someone else's file) must not have them printed, so only the bound is named.
    throw Error(ErrorKind::kHeaderTooLarge, "header length is above the 100,000,000-byte cap",
                {.file = file_name,
                 .field = "header_length",
                 .expected = fmt::format("at most {}", kMaxHeaderBytes),
                 .found = fmt::format("more than {}", kMaxHeaderBytes)});
  }
  if (n > file_size - kLengthBytes) {
    throw Error(ErrorKind::kHeaderLength, "header runs past the end of the file",
                {.file = file_name,
                 .field = "header_length",
                 .expected = fmt::format("at most {}", file_size - kLengthBytes),
                 .found = fmt::format("more than {}", file_size - kLengthBytes)});
  }
  if (prefix.size() - kLengthBytes < n) {
    throw Error(ErrorKind::kHeaderLength, "only part of the header was read",
                {.file = file_name,
                 .field = "header_length",
                 .expected = fmt::format("{} header bytes", n),
                 .found = fmt::format("{}", prefix.size() - kLengthBytes)});
  }
  const std::string_view json(reinterpret_cast<const char*>(prefix.data()) + kLengthBytes, n);
  if (const std::optional<size_t> bad = format::find_invalid_utf8(json)) {
    throw Error(ErrorKind::kHeaderUtf8, "header is not valid UTF-8",
                {.file = file_name,
                 .field = "header",
                 .found = fmt::format("an invalid UTF-8 sequence at file offset {}",
                                      kLengthBytes + *bad)});
  }

  SafetensorsHeader header = format::parse_header_json(json, file);
  header.header_bytes = n;
  header.data_start = kLengthBytes + n;
  // Writers order tensors in any way; the crate sorts by offsets before checking them. Names break
  // ties between empty tensors so that the order does not depend on the text.
  const auto by_offsets = [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  };
  // The crate writes in offset order, so the name order built in text order usually stands.
  if (!std::is_sorted(header.tensors.begin(), header.tensors.end(), by_offsets)) {
    std::sort(header.tensors.begin(), header.tensors.end(), by_offsets);
    format::index_tensor_names(header);
  }

  const uint64_t data_bytes = validate_offsets(header.tensors, file);
  const uint64_t available = file_size - header.data_start;
  if (data_bytes != available) {
    throw Error(ErrorKind::kFileSize,
                data_bytes < available ? "file has bytes after the last tensor"
                                       : "file ends before the last tensor",
                {.file = file_name,
                 .field = "file_size",
                 .expected = sum_string(header.data_start, data_bytes) + " bytes",
                 .found = fmt::format("{} bytes", file_size)});
  }
  return header;
}

}  // namespace shardload
