#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardload::checkpoint {

// A Hugging Face model id ("Qwen/Qwen3-8B", or a bare legacy name such as "gpt2") already
// downloaded into the local Hugging Face cache (`hf download`, or an engine's first start), found
// where huggingface_hub puts it, so that `shardload serve Qwen/Qwen3-8B` reads the same files vLLM
// and SGLang read for that id. Nothing is downloaded: shardload reads local files only.

// Whether `arg` has the form of a model id (huggingface_hub's rules: [A-Za-z0-9_.-] names, at most
// one '/', no "--" or "..", not starting or ending with '-' or '.'); a path that exists is taken as
// a path first.
bool looks_like_hub_id(std::string_view arg);

// The cache folder: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order).
std::string hub_cache_dir();

// The cache's folder of `id`: <cache>/models--org--name.
std::string hub_repo_dir(std::string_view id);

// Whether `revision` can name a revision of the cache: a branch or tag (refs/<revision>, which may
// hold '/', as "pr/1" does) or a commit hash. It becomes part of a path, so it is refused with a
// part that is empty, "." or "..", or that starts with '.', and with characters other than
// [A-Za-z0-9._-/] (at most 256).
bool valid_revision(std::string_view revision);

// The snapshot folder of `id` at `revision`: a commit hash names <repo>/snapshots/<hash>; a branch
// or tag, the snapshot its <repo>/refs/<revision> names (<repo>: <cache>/models--org--name). Nullopt
// when that is not in the cache. Throws Error(kInvalidArgument) for a revision that is not one
// (valid_revision), Error(kIo) for a ref that is not a commit hash.
std::optional<std::string> hub_snapshot(std::string_view id, std::string_view revision = "main");

}  // namespace shardload::checkpoint
