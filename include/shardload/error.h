#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace shardload {

// What went wrong, chosen by what the caller (or a test) needs to tell apart.
enum class ErrorKind {
  kIo,                // open/read/write/mmap failed
  kHeaderTooSmall,    // file shorter than the 8-byte length prefix
  kHeaderTooLarge,    // declared header length above the 100,000,000-byte cap
  kHeaderLength,      // declared header length runs past the end of the file
  kHeaderUtf8,        // header bytes are not valid UTF-8
  kHeaderJson,        // header is not valid JSON
  kHeaderStructure,   // JSON is valid but not the shape safetensors requires (not an object, bad entry)
  kDuplicateTensor,   // a tensor name appears twice
  kUnknownDtype,      // dtype string not known to safetensors
  kInvalidShape,      // shape not an array of non-negative integers
  kShapeOverflow,     // product of dims (or times dtype size) overflows
  kInvalidOffsets,    // data_offsets malformed, not starting at 0, holes or overlaps
  kSizeMismatch,      // data_offsets length disagrees with shape x dtype size
  kFileSize,          // data section does not end exactly at the end of the file
  kInvalidMetadata,   // __metadata__ not a string-to-string map
  kIndex,             // model.safetensors.index.json malformed or inconsistent
  kConfig,            // config.json missing or malformed
  kTensorNotFound,    // a requested or required tensor is absent
  kUnknownTensor,     // a checkpoint tensor no rule consumes or skips
  kShapeMismatch,     // a tensor's shape disagrees with config.json
  kUnsupportedDtype,  // a model tensor has a dtype shardload does not load
  kInvalidArgument,   // bad command-line / API argument
  kCancelled,         // an update was cancelled before it changed anything
  kConflict,          // an update does not fit the live weights (layout, file changed while read)
  kNode,              // another node of a distributed job failed to take part (gone, transport error)
  kDevice,            // --device cuda without a usable CUDA driver or GPU, or a CUDA call that failed
  kMemory,            // the memory (or /dev/shm space) an operation needs is more than the process can get
  kInternal,          // shardload broke one of its own invariants: a bug, reported rather than crashed on
};

std::string_view error_kind_name(ErrorKind kind);

// Where an error is and what was expected versus found; every field optional.
struct ErrorDetails {
  std::string file{};
  std::string tensor{};
  std::string field{};
  std::string expected{};
  std::string found{};
};

// Typed error carrying where (file, tensor, field) and what was expected versus found.
// what() is a single line: "<file>: tensor '<t>': <field>: <message> (expected <e>, found <f>)".
class Error : public std::runtime_error {
 public:
  using Details = ErrorDetails;

  Error(ErrorKind kind, std::string message, Details details = {});

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const Details& details() const { return details_; }
  const std::string& file() const { return details_.file; }
  const std::string& tensor() const { return details_.tensor; }
  const std::string& field() const { return details_.field; }
  const std::string& expected() const { return details_.expected; }
  const std::string& found() const { return details_.found; }

  // Returns a copy with the file filled in when it was not yet known (context added on the way out).
  Error with_file(std::string file) const;

 private:
  ErrorKind kind_;
  std::string message_;
  Details details_;
};

}  // namespace shardload
