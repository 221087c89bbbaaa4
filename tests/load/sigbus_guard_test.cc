// The SIGBUS guard: a read of a mapped file that shrank under the mapping returns false and the
// thread goes on; a SIGBUS outside a guarded read still ends the process.
#include "load/sigbus_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "load/file_access.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

constexpr uint64_t kBytes = uint64_t{3} << 20;  // 3 MiB: the mapping spans two 2 MiB blocks

char read_byte(const std::byte* at) {
  return static_cast<char>(*reinterpret_cast<const volatile char*>(at));
}

// A 3 MiB file of 'x', mapped whole, then cut to 1 MiB.
struct ShrunkMapping {
  TempDir dir;
  std::string path = dir.file("data.bin");
  int fd = -1;
  load::MappedRange range;

  ShrunkMapping() {
    ::shardload::testing::write_file(path, std::string(kBytes, 'x'));
    fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(range.map(fd, 0, kBytes));
    EXPECT_EQ(::truncate(path.c_str(), kBytes / 3), 0);
  }
  ~ShrunkMapping() { ::close(fd); }
};

TEST(SigbusGuardTest, AReadPastTheNewEndReturnsFalseAndTheThreadGoesOn) {
  ShrunkMapping file;
  ASSERT_NE(file.range.data(), nullptr);
  char seen = 0;
  EXPECT_FALSE(load::read_mapped_guarded(
      file.range.data(), kBytes, [&] { seen = read_byte(file.range.data() + 2 * kBytes / 3); }));
  EXPECT_EQ(seen, 0);
  // The guard is off again and the bytes still in the file read as before.
  EXPECT_TRUE(load::read_mapped_guarded(file.range.data(), kBytes,
                                        [&] { seen = read_byte(file.range.data() + 100); }));
  EXPECT_EQ(seen, 'x');
  // Twice: the handler stays installed and the signal is not left blocked.
  EXPECT_FALSE(load::read_mapped_guarded(
      file.range.data(), kBytes, [&] { seen = read_byte(file.range.data() + kBytes - 1); }));
}

TEST(SigbusGuardDeathTest, ASigbusOutsideTheGuardedBytesStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ShrunkMapping file;
  // The guard covers only the first MiB: the fault at 2 MiB is not its to catch.
  EXPECT_DEATH(load::read_mapped_guarded(file.range.data(), kBytes / 3,
                                         [&] { read_byte(file.range.data() + 2 * kBytes / 3); }),
               "");
}

}  // namespace
}  // namespace shardload
