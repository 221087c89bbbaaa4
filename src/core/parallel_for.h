#pragma once

#include <cstddef>
#include <exception>
#include <functional>

namespace shardload {

// Runs body(i) for i in [0, count) on `threads` threads (0: one per core), pulling indices in order so that
// neighbouring work items (sequential file ranges) run close in time. The first exception thrown by a
// worker stops the others from starting new items and is rethrown on the calling thread.
void parallel_for(size_t count, int threads, const std::function<void(size_t index, int thread)>& body);

int default_thread_count();

}  // namespace shardload
