#include <utility>

#include <fmt/format.h>

#include "core/utf8_cut.h"
#include "format/header_handler.h"
#include "format/header_json.h"

namespace shardload::format {

namespace {

constexpr size_t kParserMessageBytes = 200;

}  // namespace

std::string quote_for_message(std::string_view text) {
  std::string quoted = "\"";
  for (char c : cut_utf8(text, kQuoteBytes)) {
    quoted += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  quoted += text.size() > kQuoteBytes ? "\"..." : "\"";
  return quoted;
}

std::string Value::describe() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return flag ? "true" : "false";
    // The parser hands "-0" over as a signed zero: show the minus it was written with.
    case Kind::kNegative: return signed_value == 0 ? "-0" : fmt::format("{}", signed_value);
    case Kind::kUnsigned: return fmt::format("{}", unsigned_value);
    case Kind::kFloat: return std::string(cut_utf8(text, kQuoteBytes));
    case Kind::kString: return quote_for_message(text);
    case Kind::kObject: return "an object";
    case Kind::kArray: return "an array";
  }
  return "?";
}

bool HeaderHandler::parse_error(size_t position, const std::string&, const Json::exception& error) {
  // The parser's message goes on to quote the token it stopped at ("; last read: '...'"): bytes of
  // a file that is not a header. Only its own words before that are kept.
  std::string_view what = error.what();
  if (const size_t colon = what.find(": "); colon != std::string_view::npos) {
    what.remove_prefix(colon + 2);
  }
  what = what.substr(0, what.find("; last read:"));
  return syntax_error(position, std::string(cut_utf8(what, kParserMessageBytes)));
}

bool HeaderHandler::syntax_error(size_t position, std::string message) {
  syntax_error_.emplace(ErrorKind::kHeaderJson, "header is not valid JSON: " + std::move(message),
                        ErrorDetails{.file = std::string(file_),
                                     .field = "header",
                                     .found = fmt::format("error at header byte {}", position)});
  return false;
}

// Rejects the entry but lets the parser run on: a later syntax error must still be reported as one.
bool HeaderHandler::fail(ErrorKind kind, std::string message, ErrorDetails details) {
  details.file = std::string(file_);
  entry_error_.emplace(kind, std::move(message), std::move(details));
  state_ = State::kFailed;
  return true;
}

bool HeaderHandler::fail_field_value(const Value& value) {
  const std::string found = value.describe();
  switch (field_) {
    case Field::kDtype:
      return fail(
          ErrorKind::kHeaderStructure, "dtype is not a string",
          {.tensor = tensor_name(), .field = "dtype", .expected = "a string", .found = found});
    case Field::kShape:
      return fail(ErrorKind::kInvalidShape, "shape is not an array",
                  {.tensor = tensor_name(),
                   .field = "shape",
                   .expected = "an array of non-negative integers",
                   .found = found});
    case Field::kOffsets:
      return fail(ErrorKind::kInvalidOffsets, "data_offsets is not an array",
                  {.tensor = tensor_name(),
                   .field = "data_offsets",
                   .expected = "[begin, end]",
                   .found = found});
    case Field::kIgnored: break;
  }
  return true;
}

bool HeaderHandler::fail_top_value(const Value& value) {
  if (at_metadata_) {
    return fail(
        ErrorKind::kInvalidMetadata, "__metadata__ is not a map of strings",
        {.field = std::string(kMetadataKey), .expected = "an object", .found = value.describe()});
  }
  return fail(ErrorKind::kHeaderStructure, "tensor entry is not an object",
              {.tensor = tensor_name(), .expected = "an object", .found = value.describe()});
}

bool HeaderHandler::fail_metadata_value(const Value& value) {
  return fail(
      ErrorKind::kInvalidMetadata,
      fmt::format("value of key {} is not a string", quote_for_message(metadata_slot_->first)),
      {.field = std::string(kMetadataKey), .expected = "a string", .found = value.describe()});
}

bool HeaderHandler::fail_dimension(const Value& value) {
  return fail(ErrorKind::kInvalidShape,
              fmt::format("dimension {} is not a non-negative integer", tensor_.shape.size()),
              {.tensor = tensor_name(),
               .field = "shape",
               .expected = "an integer in [0, 2^64)",
               .found = value.describe()});
}

bool HeaderHandler::fail_offset(const Value& value) {
  return fail(ErrorKind::kInvalidOffsets, "offset is not a non-negative integer",
              {.tensor = tensor_name(),
               .field = "data_offsets",
               .expected = "an integer in [0, 2^64)",
               .found = value.describe()});
}

}  // namespace shardload::format
