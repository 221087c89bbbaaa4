#pragma once

#include "shardload/checkpoint.h"

namespace shardload::cli {

// One "warning: ..." line on stderr per thing the checkpoint reader tolerated (every command that
// opens a checkpoint prints them the same way, before its own output).
void print_warnings(const Checkpoint& checkpoint);

}  // namespace shardload::cli
