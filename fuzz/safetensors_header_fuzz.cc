// libFuzzer target: arbitrary bytes as a whole safetensors file. Only shardload::Error may come out
// of the parser; anything else (another exception, a crash, a sanitizer report) is a bug. A header
// that parses must describe a file the loader can trust.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>

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
    check(header.find(tensor.name) == &tensor);
    next = tensor.end;
  }
  check(next == header.data_bytes());
  check(next == file_size - header.data_start);
  check(header.index_.size() == header.tensors.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
