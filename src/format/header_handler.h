#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "format/header_json.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload::format {

enum class Kind { kNull, kBool, kNegative, kUnsigned, kFloat, kString, kObject, kArray };

// A JSON value as the handler sees it; described only when it ends up in an error.
struct Value {
  Kind kind;
  uint64_t unsigned_value = 0;
  int64_t signed_value = 0;
  bool flag = false;
  std::string_view text{};  // kString, and the literal of kFloat

  std::string describe() const;
};

enum class Field { kDtype, kShape, kOffsets, kIgnored };

// Where the handler is in the document; each state says what the next event may be.
enum class State {
  kTop,            // before the top-level value
  kTopObject,      // in the top-level object, at a key or its end
  kTopValue,       // at the value of a top-level key
  kMetadata,       // in __metadata__, at a key or its end
  kMetadataValue,  // at a __metadata__ value
  kTensor,         // in a tensor entry, at a key or its end
  kTensorValue,    // at the value of a tensor field
  kShape,          // in a shape array
  kOffsets,        // in a data_offsets array
  kSkip,           // inside the value of a field the crate ignores
  kFailed,         // an entry was rejected; only JSON syntax is still checked
  kDone,           // after the top-level object
};

// nlohmann SAX handler that fills a SafetensorsHeader (tensors in text order, metadata).
// Events rather than nlohmann's DOM, which silently keeps the last of duplicate keys.
class HeaderHandler {
 public:
  using Json = nlohmann::json;

  HeaderHandler(std::string_view file, SafetensorsHeader& out) : file_(file), out_(out) {}

  bool null() { return on_scalar({.kind = Kind::kNull}); }
  bool boolean(bool value) { return on_scalar({.kind = Kind::kBool, .flag = value}); }
  bool number_integer(int64_t value) {
    return on_scalar({.kind = Kind::kNegative, .signed_value = value});
  }
  bool number_unsigned(uint64_t value) {
    return on_scalar({.kind = Kind::kUnsigned, .unsigned_value = value});
  }
  bool number_float(double value, const std::string& literal) {
    // A finite literal read as infinity overflowed; serde_json calls that "number out of range".
    if (!std::isfinite(value)) {
      return syntax_error(0, "number out of range: " + literal.substr(0, kQuoteBytes));
    }
    return on_scalar({.kind = Kind::kFloat, .text = literal});
  }
  bool string(std::string& value) { return on_scalar({.kind = Kind::kString, .text = value}); }
  bool binary(Json::binary_t&) { return syntax_error(0, "binary value in a JSON text"); }
  bool start_object(size_t) { return enter() && on_open({.kind = Kind::kObject}); }
  bool start_array(size_t) { return enter() && on_open({.kind = Kind::kArray}); }
  bool end_object() { return on_close(); }
  bool end_array() { return on_close(); }
  bool key(std::string& name) { return on_key(name); }
  bool parse_error(size_t position, const std::string& last_token, const Json::exception& error);

  // Syntax errors win over entry errors, whichever came first in the text, as they do in the crate.
  void throw_if_failed() const {
    if (syntax_error_) throw *syntax_error_;
    if (entry_error_) throw *entry_error_;
  }

 private:
  // The state machine (header_handler.cc).
  bool enter();
  bool on_scalar(const Value& value);
  bool on_field_scalar(const Value& value);
  bool on_open(const Value& value);
  bool on_field_open(const Value& value);
  bool on_close();
  bool end_tensor();
  bool on_key(const std::string& name);
  bool on_top_key(const std::string& name);
  bool on_field_key(const std::string& name);

  // Errors (header_messages.cc). Each returns what the SAX callback should return.
  bool syntax_error(size_t position, std::string message);
  bool fail(ErrorKind kind, std::string message, ErrorDetails details);
  bool fail_field_value(const Value& value);
  bool fail_top_value(const Value& value);
  bool fail_metadata_value(const Value& value);
  bool fail_dimension(const Value& value);
  bool fail_offset(const Value& value);

  const std::string& tensor_name() const { return tensor_.name; }

  std::string_view file_;
  SafetensorsHeader& out_;
  State state_ = State::kTop;
  size_t depth_ = 0;
  size_t skip_depth_ = 0;
  bool at_metadata_ = false;  // the current top-level key is __metadata__
  bool seen_metadata_ = false;
  std::unordered_set<std::string> names_;  // tensor names so far: a repeat is an error
  std::map<std::string, std::string>::iterator metadata_slot_;
  TensorInfo tensor_;  // the entry being read
  Field field_ = Field::kIgnored;
  unsigned seen_fields_ = 0;
  size_t offset_count_ = 0;
  std::optional<Error> syntax_error_;
  std::optional<Error> entry_error_;
};

}  // namespace shardload::format
