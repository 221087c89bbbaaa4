// libFuzzer target: arbitrary bytes as a whole safetensors file. Only shardload::Error may come out
// of the parser; anything else (another exception, a crash, a sanitizer report) is a bug. A header
// that parses must describe a file the loader can trust. And the fast (simdjson) path of the JSON
// parser either declines a text or reads it exactly as the event (nlohmann SAX) parser does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string_view>

#include "format/header_json.h"
#include "format/length_prefix.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

void check_invariants(const shardload::SafetensorsHeader& header, uint64_t file_size) {
  check(header.data_start == 8 + header.header_bytes);
  check(header.data_start <= file_size);
  uint64_t next = 0;
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const shardload::TensorInfo& tensor = header.tensors[i];
    check(tensor.begin == next);
    check(tensor.end >= tensor.begin);
    check(shardload::shape_nbytes(tensor.shape, tensor.dtype) == tensor.nbytes());
    check(header.find(tensor.name) == &tensor);  // the name index: every name, each once
    next = tensor.end;
  }
  check(next == header.data_bytes());
  check(next == file_size - header.data_start);
}

// The JSON text of the file's header (whatever its length prefix says, cut to the file).
void check_fast_path(const uint8_t* data, size_t size) {
  if (size < shardload::format::kLengthBytes) return;
  const uint64_t n = shardload::format::load_length(reinterpret_cast<const std::byte*>(data));
  const size_t available = size - shardload::format::kLengthBytes;
  const std::string_view json(reinterpret_cast<const char*>(data) + shardload::format::kLengthBytes,
                              n < available ? n : available);
  const std::optional<shardload::SafetensorsHeader> fast =
      shardload::format::parse_header_json_fast(json);
  if (!fast) return;
  try {
    check(*fast == shardload::format::parse_header_json_events(json, "fuzz"));
  } catch (const shardload::Error&) {
    check(false);  // the fast path took a text the event parser refuses
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_fast_path(data, size);
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  std::optional<shardload::SafetensorsHeader> header;
  try {
    header.emplace(shardload::parse_safetensors_header(file, size, "fuzz"));
  } catch (const shardload::Error& error) {
    check(error.what()[0] != '\0');
    return 0;
  }
  // Outside the try: an Error thrown while checking a header that was accepted is a bug too.
  check_invariants(*header, size);
  return 0;
}
