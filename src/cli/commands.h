#pragma once

#include <CLI/CLI.hpp>

namespace shardload::cli {

// Each command registers its subcommand and options on the app; the callback runs it and throws
// shardload::Error on bad input (main turns that into one `error: ...` line).
void add_inspect_command(CLI::App& app);
void add_make_tiny_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_load_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_eplb_command(CLI::App& app);
void add_support_command(CLI::App& app);

}  // namespace shardload::cli
