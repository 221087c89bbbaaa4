#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "shardload/error.h"

namespace shardload::distributed {

// A transfer buffer of a striped load, left uninitialized (every byte is read or received before it
// is used), aligned for O_DIRECT reads with a block of slack at each end.
using Buffer = std::shared_ptr<std::byte[]>;
Buffer make_buffer(uint64_t bytes);

// Reads file bytes [offset, offset + bytes) of an O_DIRECT descriptor into `buffer` (from
// make_buffer(bytes)) through the aligned blocks that hold them; returns where the first byte
// landed. Throws Error(kIo) naming `where`.
const std::byte* read_direct(int fd, std::byte* buffer, uint64_t offset, uint64_t bytes,
                             const ErrorDetails& where);

}  // namespace shardload::distributed
