#pragma once

#include <string>

namespace shardload::cli {

// An export directory given where a checkpoint is needed (plan, export): a usage error that says
// what the directory is and what takes it (`shardload load`), instead of the checkpoint reader's
// complaint about its files. Does nothing for anything else.
void refuse_export_as_checkpoint(const std::string& path, const char* command);

// One line describing an export: "a shardload export of ARCH (tp=4 ep=2 moe_tp=2, BF16,
// quantization none)".
std::string describe_export(const std::string& dir);

}  // namespace shardload::cli
