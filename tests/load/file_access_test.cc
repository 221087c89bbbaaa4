// Page-cache residency: cachestat(2) and the mincore fallback count the same pages, on a file
// evicted and then read in part; the huge-mapping probe.
#include "load/file_access.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(PageCacheResidencyTest, CachestatAndMincoreCountTheSamePages) {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  ::shardload::testing::write_file(path, std::string(8 * kMiB, 'x'));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const std::optional<uint64_t> evicted = load::cached_bytes_mincore(fd, 8 * kMiB);
  ASSERT_TRUE(evicted.has_value());
  if (*evicted > 0) {
    ::close(fd);
    GTEST_SKIP() << "this file system keeps the pages cached";
  }
  // No readahead: exactly the 3 MiB read come into the cache.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  std::vector<char> buffer(3 * kMiB);
  ASSERT_EQ(::pread(fd, buffer.data(), buffer.size(), 2 * kMiB),
            static_cast<ssize_t>(buffer.size()));
  const std::optional<uint64_t> by_mincore = load::cached_bytes_mincore(fd, 8 * kMiB);
  const std::optional<uint64_t> by_cachestat = load::cached_bytes_cachestat(fd);
  ::close(fd);
  ASSERT_TRUE(by_mincore.has_value());
  EXPECT_GE(*by_mincore, 3 * kMiB);
  EXPECT_LT(*by_mincore, 8 * kMiB);
  if (!by_cachestat) GTEST_SKIP() << "no cachestat(2) on this kernel (before 6.5)";
  EXPECT_EQ(*by_cachestat, *by_mincore);
}

TEST(PageCacheResidencyTest, AnEmptyFileHasNothingCached) {
  TempDir dir;
  const std::string path = dir.file("empty.bin");
  ::shardload::testing::write_file(path, std::string());
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(load::cached_bytes_mincore(fd, 0), std::optional<uint64_t>(0));
  const std::optional<uint64_t> by_cachestat = load::cached_bytes_cachestat(fd);
  if (by_cachestat) {
    EXPECT_EQ(*by_cachestat, 0u);
  }
  ::close(fd);
}

// The probe maps and touches 4 MiB from the middle of a file: smaller files never map as huge pages,
// and probing never changes what a load reads.
TEST(HugeMappingProbeTest, FilesUnder8MiBAreNeverHuge) {
  TempDir dir;
  const std::string path = dir.file("small.safetensors");
  const std::vector<std::byte> data(7 * kMiB, std::byte{'x'});
  write_safetensors(path, {{"x", DType::kU8, {data.size()}, data}});
  EXPECT_FALSE(load::maps_as_huge_pages(SafetensorsFile::open(path)));
}

}  // namespace
}  // namespace shardload
