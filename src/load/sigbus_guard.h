#pragma once

#include <cstddef>
#include <functional>

namespace shardload::load {

// Runs `read`, which reads the mapped file bytes [begin, begin + bytes), and returns false instead
// of letting the process die when a read there raises SIGBUS: the file shrank under the mapping, or
// a page of it could not be read in. The first call installs a process-wide SIGBUS handler that
// passes every other SIGBUS (other addresses, other threads) to the disposition it replaced.
// `read` must own nothing that needs destroying: a SIGBUS leaves it by a long jump.
bool read_mapped_guarded(const std::byte* begin, size_t bytes, const std::function<void()>& read);

}  // namespace shardload::load
