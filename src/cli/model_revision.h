#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace shardload::cli {

// --revision of the commands that read a model: which version of a Hugging Face model id, as the
// engines' --revision and `hf download --revision` take it (a branch, tag or commit hash).
void add_revision_option(CLI::App& cmd, std::string& revision);

// `model` as the command opens it: itself without a revision, else the id's snapshot at that
// revision in the local Hugging Face cache (resolve_model_path). A path given a revision, or a
// revision that is not a name, is a usage error; a revision not in the cache is Error(kIo).
std::string model_at_revision(const std::string& model, const std::string& revision);

}  // namespace shardload::cli
