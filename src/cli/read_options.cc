#include "cli/read_options.h"

namespace shardload::cli {

ReadPolicy ReadOptions::policy() const { return read_policy_from_name(read).value(); }

void add_read_option(CLI::App& cmd, ReadOptions& options) {
  cmd.add_option(
         "--read", options.read,
         "With several nodes: striped (each needed byte read once, by one node, and sent to the "
         "nodes that hold it) or local (each node reads what its ranks need)")
      ->check(CLI::IsMember(names_of(kReadPolicyNames)))
      ->capture_default_str();
}

}  // namespace shardload::cli
