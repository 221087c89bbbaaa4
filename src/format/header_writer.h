#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardload/safetensors.h"

namespace shardload::format {

// A file's layout as the crate writes it: header JSON padded to a multiple of 8 bytes, then the
// tensors' bytes in `order` (positions in the caller's vector), back to back.
struct WriteLayout {
  std::string header;
  std::vector<size_t> order;
  uint64_t data_bytes = 0;
};

// Checks the tensors to write (unique UTF-8 names, data exactly shape x dtype long; with `sparse`,
// no data, each tensor counted as shape x dtype bytes) and the metadata (UTF-8) and lays them out.
// Throws Error(kInvalidArgument), or Error(kHeaderTooLarge) past the header cap.
WriteLayout layout_safetensors(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata,
                               bool sparse = false);

}  // namespace shardload::format
