#include "shardload/error.h"

#include <fmt/format.h>

namespace shardload {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kHeaderTooSmall: return "header_too_small";
    case ErrorKind::kHeaderTooLarge: return "header_too_large";
    case ErrorKind::kHeaderLength: return "header_length";
    case ErrorKind::kHeaderUtf8: return "header_utf8";
    case ErrorKind::kHeaderJson: return "header_json";
    case ErrorKind::kHeaderStructure: return "header_structure";
    case ErrorKind::kDuplicateTensor: return "duplicate_tensor";
    case ErrorKind::kUnknownDtype: return "unknown_dtype";
    case ErrorKind::kInvalidShape: return "invalid_shape";
    case ErrorKind::kShapeOverflow: return "shape_overflow";
    case ErrorKind::kInvalidOffsets: return "invalid_offsets";
    case ErrorKind::kSizeMismatch: return "size_mismatch";
    case ErrorKind::kFileSize: return "file_size";
    case ErrorKind::kInvalidMetadata: return "invalid_metadata";
    case ErrorKind::kIndex: return "index";
    case ErrorKind::kConfig: return "config";
    case ErrorKind::kTensorNotFound: return "tensor_not_found";
    case ErrorKind::kUnknownTensor: return "unknown_tensor";
    case ErrorKind::kShapeMismatch: return "shape_mismatch";
    case ErrorKind::kUnsupportedDtype: return "unsupported_dtype";
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kCancelled: return "cancelled";
    case ErrorKind::kConflict: return "conflict";
    case ErrorKind::kNode: return "node";
    case ErrorKind::kDevice: return "device";
    case ErrorKind::kMemory: return "memory";
    case ErrorKind::kInternal: return "internal";
  }
  return "unknown";
}

namespace {

std::string format_message(const std::string& message, const Error::Details& d) {
  std::string out;
  if (!d.file.empty()) out += d.file + ": ";
  if (!d.tensor.empty()) out += fmt::format("tensor '{}': ", d.tensor);
  if (!d.field.empty()) out += d.field + ": ";
  out += message;
  // Only what is known: a "-" in place of the other half reads as a value.
  if (!d.expected.empty() && !d.found.empty()) {
    out += fmt::format(" (expected {}, found {})", d.expected, d.found);
  } else if (!d.expected.empty()) {
    out += fmt::format(" (expected {})", d.expected);
  } else if (!d.found.empty()) {
    out += fmt::format(" (found {})", d.found);
  }
  // One line, always: file content may carry newlines into a message.
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

}  // namespace

Error::Error(ErrorKind kind, std::string message, Details details)
    : std::runtime_error(format_message(message, details)),
      kind_(kind),
      message_(std::move(message)),
      details_(std::move(details)) {}

Error Error::with_file(std::string file) const {
  if (!details_.file.empty()) return *this;
  Details details = details_;
  details.file = std::move(file);
  return Error(kind_, message_, std::move(details));
}

}  // namespace shardload
