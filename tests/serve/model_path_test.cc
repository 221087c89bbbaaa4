#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "serve/shm_store.h"
#include "temp_dir.h"

namespace shardload::serve {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// The path the server records (manifest, /get_model_info) for a Hugging Face model id is its snapshot
// folder, so that readers and a restart open the same files whatever cache variables they have.
TEST(ModelPath, AModelIdInTheHuggingFaceCacheIsRecordedAsItsSnapshot) {
  TempDir dir;
  const std::string commit = "89abcdef0123456789abcdef0123456789abcdef";
  const fs::path repo = dir.path() / "models--someorg--tiny";
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  write_file((repo / "refs" / "main").string(), commit + "\n");
  setenv("HF_HUB_CACHE", dir.path().c_str(), 1);
  EXPECT_EQ(absolute_model_path("someorg/tiny"), (repo / "snapshots" / commit).string());
  // Not in the cache: made absolute as any relative path (opening it then says where it looked).
  EXPECT_EQ(absolute_model_path("someorg/other"), (fs::current_path() / "someorg/other").string());
  unsetenv("HF_HUB_CACHE");
}

}  // namespace
}  // namespace shardload::serve
