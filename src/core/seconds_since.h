#pragma once

#include <chrono>

namespace shardload {

// Seconds elapsed since `start` on the steady clock (phase timings in summaries and results).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace shardload
