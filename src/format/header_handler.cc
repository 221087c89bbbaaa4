#include "format/header_handler.h"

#include <utility>

#include <fmt/format.h>

namespace shardload::format {

namespace {

// serde_json gives up at 128 nested containers; refusing the same keeps us at least as strict as
// the crate.
constexpr size_t kMaxDepth = 127;

unsigned bit(Field field) { return 1u << static_cast<unsigned>(field); }

}  // namespace

bool HeaderHandler::enter() {
  if (++depth_ > kMaxDepth) {
    return syntax_error(0, fmt::format("nested deeper than {} levels", kMaxDepth));
  }
  return true;
}

bool HeaderHandler::on_scalar(const Value& value) {
  switch (state_) {
    case State::kTop:
      return fail(ErrorKind::kHeaderStructure, "header is not a JSON object",
                  {.field = "header", .expected = "an object", .found = value.describe()});
    case State::kTopValue:
      if (at_metadata_ && value.kind == Kind::kNull) {  // the crate reads null as "none"
        state_ = State::kTopObject;
        return true;
      }
      return fail_top_value(value);
    case State::kMetadataValue:
      if (value.kind != Kind::kString) return fail_metadata_value(value);
      metadata_slot_->second = value.text;
      state_ = State::kMetadata;
      return true;
    case State::kTensorValue: return on_field_scalar(value);
    case State::kShape:
      if (value.kind != Kind::kUnsigned) return fail_dimension(value);
      tensor_.shape.push_back(value.unsigned_value);
      return true;
    case State::kOffsets:
      if (value.kind != Kind::kUnsigned) return fail_offset(value);
      if (offset_count_ == 2) {
        return fail(ErrorKind::kInvalidOffsets, "data_offsets has more than two values",
                    {.tensor = tensor_name(), .field = "data_offsets", .expected = "[begin, end]"});
      }
      (offset_count_++ == 0 ? tensor_.begin : tensor_.end) = value.unsigned_value;
      return true;
    case State::kSkip:
      if (skip_depth_ == 0) state_ = State::kTensor;
      return true;
    case State::kTopObject:
    case State::kMetadata:
    case State::kTensor:
    case State::kFailed:
    case State::kDone: return true;  // the parser never sends a value where a key is due
  }
  return true;
}

bool HeaderHandler::on_field_scalar(const Value& value) {
  switch (field_) {
    case Field::kDtype: {
      if (value.kind != Kind::kString) return fail_field_value(value);
      const std::optional<DType> dtype = parse_dtype(value.text);
      if (!dtype) {
        return fail(ErrorKind::kUnknownDtype, "dtype is not one safetensors knows",
                    {.tensor = tensor_name(), .field = "dtype", .found = value.describe()});
      }
      tensor_.dtype = *dtype;
      break;
    }
    case Field::kShape:
    case Field::kOffsets: return fail_field_value(value);
    case Field::kIgnored: break;
  }
  state_ = State::kTensor;
  return true;
}

bool HeaderHandler::on_open(const Value& value) {
  const bool is_object = value.kind == Kind::kObject;
  switch (state_) {
    case State::kTop:
      if (!is_object) return on_scalar(value);
      state_ = State::kTopObject;
      return true;
    case State::kTopValue:
      if (!is_object) return fail_top_value(value);
      if (at_metadata_) {
        state_ = State::kMetadata;
      } else {
        seen_fields_ = 0;
        state_ = State::kTensor;
      }
      return true;
    case State::kMetadataValue: return fail_metadata_value(value);
    case State::kTensorValue: return on_field_open(value);
    case State::kShape: return fail_dimension(value);
    case State::kOffsets: return fail_offset(value);
    case State::kSkip: ++skip_depth_; return true;
    case State::kTopObject:
    case State::kMetadata:
    case State::kTensor:
    case State::kFailed:
    case State::kDone: return true;
  }
  return true;
}

bool HeaderHandler::on_field_open(const Value& value) {
  const bool is_array = value.kind == Kind::kArray;
  switch (field_) {
    case Field::kDtype: return fail_field_value(value);
    case Field::kShape:
      if (!is_array) return fail_field_value(value);
      state_ = State::kShape;
      return true;
    case Field::kOffsets:
      if (!is_array) return fail_field_value(value);
      offset_count_ = 0;
      state_ = State::kOffsets;
      return true;
    case Field::kIgnored:
      skip_depth_ = 1;
      state_ = State::kSkip;
      return true;
  }
  return true;
}

bool HeaderHandler::on_close() {
  --depth_;
  switch (state_) {
    case State::kTopObject: state_ = State::kDone; return true;
    case State::kMetadata: state_ = State::kTopObject; return true;
    case State::kTensor: return end_tensor();
    case State::kShape: state_ = State::kTensor; return true;
    case State::kOffsets:
      if (offset_count_ != 2) {
        return fail(ErrorKind::kInvalidOffsets, "data_offsets must hold two values",
                    {.tensor = tensor_name(),
                     .field = "data_offsets",
                     .expected = "[begin, end]",
                     .found = fmt::format("{} value(s)", offset_count_)});
      }
      state_ = State::kTensor;
      return true;
    case State::kSkip:
      if (--skip_depth_ == 0) state_ = State::kTensor;
      return true;
    case State::kTop:
    case State::kTopValue:
    case State::kMetadataValue:
    case State::kTensorValue:
    case State::kFailed:
    case State::kDone: return true;
  }
  return true;
}

bool HeaderHandler::end_tensor() {
  static constexpr std::pair<Field, std::string_view> kRequired[] = {
      {Field::kDtype, "dtype"}, {Field::kShape, "shape"}, {Field::kOffsets, "data_offsets"}};
  for (const auto& [field, name] : kRequired) {
    if ((seen_fields_ & bit(field)) == 0) {
      return fail(ErrorKind::kHeaderStructure, "missing field",
                  {.tensor = tensor_name(), .field = std::string(name)});
    }
  }
  out_.tensors.push_back(std::move(tensor_));
  state_ = State::kTopObject;
  return true;
}

bool HeaderHandler::on_key(const std::string& name) {
  switch (state_) {
    case State::kTopObject: return on_top_key(name);
    case State::kMetadata: {
      auto [slot, inserted] = out_.metadata.try_emplace(name);
      if (!inserted) {
        return fail(ErrorKind::kInvalidMetadata, "key appears twice in __metadata__",
                    {.field = std::string(kMetadataKey), .found = quote_for_message(name)});
      }
      metadata_slot_ = slot;
      state_ = State::kMetadataValue;
      return true;
    }
    case State::kTensor: return on_field_key(name);
    case State::kTop:
    case State::kTopValue:
    case State::kMetadataValue:
    case State::kTensorValue:
    case State::kShape:
    case State::kOffsets:
    case State::kSkip:
    case State::kFailed:
    case State::kDone: return true;
  }
  return true;
}

bool HeaderHandler::on_top_key(const std::string& name) {
  if (name == kMetadataKey) {
    if (seen_metadata_) {
      return fail(ErrorKind::kInvalidMetadata, "__metadata__ appears twice",
                  {.field = std::string(kMetadataKey)});
    }
    seen_metadata_ = true;
  } else if (!names_.insert(name).second) {
    return fail(ErrorKind::kDuplicateTensor, "tensor name appears twice",
                {.tensor = name, .field = "name"});
  }
  at_metadata_ = name == kMetadataKey;
  if (!at_metadata_) {
    tensor_ = TensorInfo{};
    tensor_.name = name;
  }
  state_ = State::kTopValue;
  return true;
}

bool HeaderHandler::on_field_key(const std::string& name) {
  if (name == "dtype") {
    field_ = Field::kDtype;
  } else if (name == "shape") {
    field_ = Field::kShape;
  } else if (name == "data_offsets") {
    field_ = Field::kOffsets;
  } else {
    field_ = Field::kIgnored;  // the crate ignores fields it does not know
  }
  if (field_ != Field::kIgnored) {
    if ((seen_fields_ & bit(field_)) != 0) {
      return fail(ErrorKind::kHeaderStructure, "field appears twice",
                  {.tensor = tensor_name(), .field = name});
    }
    seen_fields_ |= bit(field_);
  }
  state_ = State::kTensorValue;
  return true;
}

}  // namespace shardload::format
