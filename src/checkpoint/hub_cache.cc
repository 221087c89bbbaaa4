#include "checkpoint/hub_cache.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "shardload/error.h"

namespace shardload::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

bool valid_part(std::string_view part) {
  if (part.empty() || part.size() > 96) return false;
  if (!std::all_of(part.begin(), part.end(), name_char)) return false;
  const auto edge = [](char c) { return c == '-' || c == '.'; };
  return !edge(part.front()) && !edge(part.back());
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

bool looks_like_hub_id(std::string_view arg) {
  if (arg.find("--") != std::string_view::npos || arg.find("..") != std::string_view::npos)
    return false;
  const size_t slash = arg.find('/');
  if (slash == std::string_view::npos) return valid_part(arg);
  return valid_part(arg.substr(0, slash)) && valid_part(arg.substr(slash + 1));
}

std::string hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (std::string dir = env(name); !dir.empty()) return dir;
  }
  if (const std::string home = env("HF_HOME"); !home.empty())
    return (fs::path(home) / "hub").string();
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    return (fs::path(xdg) / "huggingface" / "hub").string();
  }
  return (fs::path(env("HOME")) / ".cache" / "huggingface" / "hub").string();
}

std::string hub_repo_dir(std::string_view id) {
  std::string folder = "models--";  // "org/name" -> models--org--name
  for (const char c : id) folder += c == '/' ? std::string("--") : std::string(1, c);
  return (fs::path(hub_cache_dir()) / folder).string();
}

bool valid_revision(std::string_view revision) {
  if (revision.empty() || revision.size() > 256) return false;
  size_t start = 0;
  while (start <= revision.size()) {
    const size_t end = std::min(revision.find('/', start), revision.size());
    const std::string_view part = revision.substr(start, end - start);
    if (part.empty() || part.front() == '.' ||
        !std::all_of(part.begin(), part.end(), name_char)) {
      return false;
    }
    start = end + 1;
  }
  return true;
}

std::optional<std::string> hub_snapshot(std::string_view id, std::string_view revision) {
  if (!valid_revision(revision)) {
    // Never the text itself: it came from a command line or a request.
    throw Error(ErrorKind::kInvalidArgument, "not a revision name",
                {.field = "revision",
                 .expected = "a branch, tag or commit hash ([A-Za-z0-9._-] parts separated by '/')",
                 .found = std::to_string(revision.size()) + " characters"});
  }
  const fs::path repo = hub_repo_dir(id);
  std::error_code ec;
  if (is_commit_hash(revision)) {
    const fs::path snapshot = repo / "snapshots" / std::string(revision);
    if (!fs::is_directory(snapshot, ec)) return std::nullopt;
    return snapshot.string();
  }
  const fs::path ref = repo / "refs" / std::string(revision);
  if (!fs::is_regular_file(ref, ec)) return std::nullopt;
  std::ifstream in(ref, std::ios::binary);
  char buffer[128] = {};
  in.read(buffer, sizeof buffer);
  std::string commit(buffer, static_cast<size_t>(in.gcount()));
  while (!commit.empty() &&
         (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) {
    commit.pop_back();
  }
  if (!is_commit_hash(commit)) {
    // Never the file's bytes: only that they are not a commit.
    throw Error(ErrorKind::kIo, "the Hugging Face cache's revision is not a commit hash",
                {.file = ref.string(),
                 .expected = "40 lowercase hex digits",
                 .found = "other content (" + std::to_string(commit.size()) + " bytes)"});
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) return std::nullopt;
  return snapshot.string();
}

}  // namespace shardload::checkpoint
