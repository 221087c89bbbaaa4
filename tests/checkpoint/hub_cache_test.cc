#include "checkpoint/hub_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";

// The cache variables this test sets, cleared before each test and after it (HOME put back).
class HubCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override {
    clear();
    setenv("HOME", home_.c_str(), 1);
  }
  const std::string home_ = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "/";
  static void clear() {
    for (const char* name :
         {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) {
      unsetenv(name);
    }
  }
};

// `model` laid out in `cache` as huggingface_hub lays out a download of `folder`
// (models--org--name): each file a blob, the snapshot relative symlinks to them, refs/main the
// snapshot's commit.
fs::path put_in_cache(const fs::path& model, const fs::path& cache, const std::string& folder) {
  const fs::path repo = cache / folder;
  const fs::path snapshot = repo / "snapshots" / kCommit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  fs::create_directories(repo / "refs");
  write_file((repo / "refs" / "main").string(), std::string(kCommit));
  int blob = 0;
  for (const auto& entry : fs::directory_iterator(model)) {
    const std::string name = "blob" + std::to_string(blob++);
    fs::copy_file(entry.path(), repo / "blobs" / name);
    fs::create_symlink(fs::path("../../blobs") / name, snapshot / entry.path().filename());
  }
  return snapshot;
}

TEST_F(HubCacheTest, AModelIdOpensItsSnapshotInTheCache) {
  TempDir dir;
  const fs::path model = dir.path() / "model";
  make_tiny({.arch = "llama", .out = model.string()});
  const fs::path snapshot = put_in_cache(model, dir.path() / "hub", "models--someorg--tiny-llama");
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);

  const Checkpoint from_cache = Checkpoint::open("someorg/tiny-llama");
  const Checkpoint local = Checkpoint::open(model.string());
  EXPECT_EQ(from_cache.path(), snapshot.string());
  EXPECT_EQ(from_cache.tensor_names(), local.tensor_names());
  EXPECT_EQ(from_cache.config(), local.config());
  EXPECT_TRUE(from_cache.warnings().empty());
}

TEST_F(HubCacheTest, TheCacheFolderIsFoundAsHuggingfaceHubFindsIt) {
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(checkpoint::hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(checkpoint::hub_cache_dir(), "/xdg/huggingface/hub");
  setenv("HF_HOME", "/hf-home", 1);
  EXPECT_EQ(checkpoint::hub_cache_dir(), "/hf-home/hub");
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(checkpoint::hub_cache_dir(), "/legacy");
  setenv("HF_HUB_CACHE", "/hub-cache", 1);
  EXPECT_EQ(checkpoint::hub_cache_dir(), "/hub-cache");
  EXPECT_EQ(checkpoint::hub_repo_dir("Qwen/Qwen3-8B"), "/hub-cache/models--Qwen--Qwen3-8B");
  EXPECT_EQ(checkpoint::hub_repo_dir("gpt2"), "/hub-cache/models--gpt2");
}

TEST_F(HubCacheTest, OnlyModelIdsAreLookedUp) {
  for (const char* id : {"Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V3.1", "gpt2", "a_b/c.d"}) {
    EXPECT_TRUE(checkpoint::looks_like_hub_id(id)) << id;
  }
  for (const char* arg : {"/abs/model", "./model", "../model", "a/b/c", "a--b/c", "a/..",
                          ".hidden/x", "x/", "org/-name", "", "a b/c", "a/b\n"}) {
    EXPECT_FALSE(checkpoint::looks_like_hub_id(arg)) << arg;
  }
}

TEST_F(HubCacheTest, AnIdNotInTheCacheSaysWhereItLookedAndHowToDownload) {
  TempDir dir;
  setenv("HF_HUB_CACHE", dir.path().c_str(), 1);
  try {
    Checkpoint::open("someorg/absent");
    FAIL() << "opened an id that is not in the cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(e.file(), "someorg/absent");
    EXPECT_NE(e.expected().find((dir.path() / "models--someorg--absent").string()),
              std::string::npos);
    EXPECT_NE(e.expected().find("hf download someorg/absent"), std::string::npos);
  }
  // A path that is not an id is only a missing path.
  try {
    Checkpoint::open("some/missing/dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.message()), "no such file or directory");
  }
}

TEST_F(HubCacheTest, ALocalDirectoryOfTheSameNameWins) {
  TempDir dir;
  make_tiny({.arch = "qwen3", .out = (dir.path() / "someorg" / "tiny").string()});
  make_tiny({.arch = "llama", .out = (dir.path() / "cached").string()});
  put_in_cache(dir.path() / "cached", dir.path() / "hub", "models--someorg--tiny");
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);
  const fs::path before = fs::current_path();
  fs::current_path(dir.path());
  const Checkpoint local = Checkpoint::open("someorg/tiny");
  fs::current_path(before);
  EXPECT_EQ(local.path(), "someorg/tiny");
  EXPECT_EQ(local.config().at("architectures").at(0), "Qwen3ForCausalLM");
}

TEST_F(HubCacheTest, AMainRefThatIsNotACommitIsRefusedWithoutItsBytes) {
  TempDir dir;
  make_tiny({.arch = "llama", .out = (dir.path() / "model").string()});
  const fs::path repo = dir.path() / "hub" / "models--someorg--tiny";
  put_in_cache(dir.path() / "model", dir.path() / "hub", "models--someorg--tiny");
  write_file((repo / "refs" / "main").string(), std::string("../../../../etc/secret-token"));
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);
  try {
    Checkpoint::open("someorg/tiny");
    FAIL() << "opened a cache entry whose refs/main is not a commit";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(e.file(), (repo / "refs" / "main").string());
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
}

// A second version of a cached model: `model`'s files as the snapshot of `commit` (copied; the
// first version's blobs stay), named by refs/`ref` when given.
void add_version(const fs::path& model, const fs::path& repo, const std::string& commit,
                 const std::string& ref) {
  const fs::path snapshot = repo / "snapshots" / commit;
  fs::create_directories(snapshot);
  for (const auto& entry : fs::directory_iterator(model)) {
    fs::copy_file(entry.path(), snapshot / entry.path().filename());
  }
  if (ref.empty()) return;
  fs::create_directories((repo / "refs" / ref).parent_path());
  write_file((repo / "refs" / ref).string(), commit + "\n");
}

constexpr char kSecondCommit[] = "89abcdef0123456789abcdef0123456789abcdef";

// --revision / revision=: a branch or tag (refs/<revision>, "pr/1" as the Hub names pull requests)
// or a commit hash picks that snapshot; main stays the default.
TEST_F(HubCacheTest, ARevisionPicksItsSnapshot) {
  TempDir dir;
  make_tiny({.arch = "llama", .out = (dir.path() / "v1").string()});
  make_tiny({.arch = "qwen3", .out = (dir.path() / "v2").string()});
  const fs::path repo = dir.path() / "hub" / "models--someorg--tiny";
  const fs::path first =
      put_in_cache(dir.path() / "v1", dir.path() / "hub", "models--someorg--tiny");
  add_version(dir.path() / "v2", repo, kSecondCommit, "step-1200");
  fs::create_directories(repo / "refs" / "pr");
  write_file((repo / "refs" / "pr" / "1").string(), std::string(kSecondCommit));
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);

  const std::string second = (repo / "snapshots" / kSecondCommit).string();
  EXPECT_EQ(resolve_model_path("someorg/tiny"), first.string());
  EXPECT_EQ(resolve_model_path("someorg/tiny", "main"), first.string());
  EXPECT_EQ(resolve_model_path("someorg/tiny", "step-1200"), second);
  EXPECT_EQ(resolve_model_path("someorg/tiny", "pr/1"), second);
  EXPECT_EQ(resolve_model_path("someorg/tiny", kSecondCommit), second);
  EXPECT_EQ(resolve_model_path("someorg/tiny", kCommit), first.string());
  const Checkpoint at = Checkpoint::open(resolve_model_path("someorg/tiny", "step-1200"));
  EXPECT_EQ(at.config().at("architectures").at(0), "Qwen3ForCausalLM");
}

TEST_F(HubCacheTest, ARevisionNotInTheCacheSaysWhereItLooked) {
  TempDir dir;
  make_tiny({.arch = "llama", .out = (dir.path() / "model").string()});
  put_in_cache(dir.path() / "model", dir.path() / "hub", "models--someorg--tiny");
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);
  for (const char* revision : {"v9", "0000000000000000000000000000000000000000"}) {
    try {
      resolve_model_path("someorg/tiny", revision);
      FAIL() << revision;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_EQ(e.file(), (dir.path() / "hub" / "models--someorg--tiny").string());
      EXPECT_NE(e.expected().find(std::string("hf download someorg/tiny --revision ") + revision),
                std::string::npos)
          << e.expected();
    }
  }
  // A revision is a version of a model id: a path given one is refused.
  try {
    resolve_model_path((dir.path() / "model").string(), "main");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

// A revision comes from a command line or a request, and becomes a path under refs/: one that
// would leave the repository's folder, or is not a name, is refused without being echoed (a file
// it would reach is there, so that only the refusal keeps it out).
TEST_F(HubCacheTest, ARevisionThatIsNotANameIsRefused) {
  TempDir dir;
  make_tiny({.arch = "llama", .out = (dir.path() / "model").string()});
  const fs::path repo = dir.path() / "hub" / "models--someorg--tiny";
  put_in_cache(dir.path() / "model", dir.path() / "hub", "models--someorg--tiny");
  write_file((repo / "escaped").string(), std::string(kCommit));
  setenv("HF_HUB_CACHE", (dir.path() / "hub").c_str(), 1);
  for (const char* revision : {"../escaped", "a/../../escaped", "/etc/passwd", ".hidden", "a//b",
                               "a/", "a b", "a\nb", "", "main\\x"}) {
    EXPECT_FALSE(checkpoint::valid_revision(revision)) << revision;
    try {
      checkpoint::hub_snapshot("someorg/tiny", revision);
      FAIL() << revision;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << revision;
      for (const char* word : {"escaped", "passwd", "hidden"}) {
        EXPECT_EQ(std::string(e.what()).find(word), std::string::npos) << e.what();
      }
    }
  }
  for (const char* revision : {"main", "v1.0", "pr/1", "refs-like_name", kCommit}) {
    EXPECT_TRUE(checkpoint::valid_revision(revision)) << revision;
  }
}

}  // namespace
}  // namespace shardload
