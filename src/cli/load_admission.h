#pragma once

#include <vector>

#include "shardload/loader.h"
#include "shardload/plan.h"

namespace shardload::cli {

// Before a load (or an export, which loads every rank first) allocates anything: throws
// Error(kMemory) naming both numbers when the rank buffers of `ranks` (empty: all) and the room
// `threads` readers (0: one per core) work in on the read path `io` do not fit in what this process
// can get.
void admit_load(const Plan& plan, const std::vector<int>& ranks, int threads, IoMode io);

}  // namespace shardload::cli
