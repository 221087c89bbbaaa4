#include "cli/model_revision.h"

#include "cli/usage_error.h"
#include "shardload/checkpoint.h"

namespace shardload::cli {

void add_revision_option(CLI::App& cmd, std::string& revision) {
  cmd.add_option("--revision", revision,
                 "With a Hugging Face model id: the branch, tag or commit hash to read from the "
                 "local cache (default: main)");
}

std::string model_at_revision(const std::string& model, const std::string& revision) {
  if (revision.empty()) return model;
  return as_usage_error([&] { return resolve_model_path(model, revision); });
}

}  // namespace shardload::cli
