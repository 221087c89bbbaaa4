// The README's support matrix is `shardload support`'s output, so that it cannot say what the code
// does not do: this test fails as soon as they differ, and names the command that rewrites it.
#include <gtest/gtest.h>

#include <string>

#include "shardload_bin.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::read_file;
using ::shardload::testing::run_shardload;

constexpr const char* kBegin = "<!-- support-matrix: begin";
constexpr const char* kEnd = "<!-- support-matrix: end";
constexpr const char* kRegenerate =
    "README.md's support matrix is not `shardload support`'s output: run `make readme-matrix` (or "
    "scripts/readme-matrix.sh BINARY) and commit README.md";

TEST(ReadmeMatrix, IsTheOutputOfShardloadSupport) {
  const std::string readme = read_file(testing::source_dir() + "/README.md");
  const size_t begin = readme.find(kBegin);
  ASSERT_NE(begin, std::string::npos) << "README.md has no line starting " << kBegin;
  const size_t first = readme.find('\n', begin) + 1;
  const size_t end = readme.find(kEnd, first);
  ASSERT_NE(end, std::string::npos) << "README.md has no line starting " << kEnd;
  const CommandResult support = run_shardload({"support"});
  ASSERT_EQ(support.exit_code, 0) << support.err;
  EXPECT_EQ(readme.substr(first, end - first), support.out) << kRegenerate;
}

}  // namespace
}  // namespace shardload
