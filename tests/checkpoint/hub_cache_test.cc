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

}  // namespace
}  // namespace shardload
