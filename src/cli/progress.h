#pragma once

#include <cstdint>
#include <functional>

namespace shardload::cli {

// A progress bar on stderr when it is a terminal (nothing otherwise), redrawn at most ten times a second.
std::function<void(uint64_t done, uint64_t total)> make_progress_bar();
// Draws the bar full and ends its line, if one was drawn (call it once the load succeeded).
void finish_progress_bar();

}  // namespace shardload::cli
