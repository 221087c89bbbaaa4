// What admission reads of the cgroup file system, on trees written here: cgroup v2 (memory.max at
// several levels) and v1 (hierarchical_memory_limit), page cache counted as room, shared memory
// not.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "core/admission.h"
#include "shardload/error.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  write_file(path.string(), text);
}

TEST(Admission, CgroupV2TakesTheTightestLevelAndCountsReclaimableCacheAsRoom) {
  TempDir dir;
  const fs::path sys = dir.path();
  // The job's cgroup: 1000 MiB, 700 MiB used of which 300 MiB page cache (100 MiB of it shmem).
  write(sys / "job/task/memory.max", std::to_string(1000ull << 20) + "\n");
  write(sys / "job/task/memory.current", std::to_string(700ull << 20) + "\n");
  write(sys / "job/task/memory.stat",
        "anon 1\nfile " + std::to_string(300ull << 20) + "\nshmem " + std::to_string(100ull << 20) +
            "\n");
  // Its parent has no limit ("max").
  write(sys / "job/memory.max", "max\n");
  write(sys / "job/memory.current", "12345\n");
  std::optional<MemoryRoom> room = cgroup_room(sys, "0::/job/task\n");
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, (1000ull - 500) << 20);  // 700 used less 200 reclaimable
  EXPECT_NE(room->limit.find("cgroup memory limit of " + std::to_string(1000ull << 20)),
            std::string::npos)
      << room->limit;

  // A tighter parent wins.
  write(sys / "job/memory.max", std::to_string(600ull << 20) + "\n");
  write(sys / "job/memory.current", std::to_string(550ull << 20) + "\n");
  room = cgroup_room(sys, "0::/job/task\n");
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, 50ull << 20);

  // No limit anywhere: nothing to compare with.
  EXPECT_FALSE(cgroup_room(sys, "0::/elsewhere\n").has_value());
}

TEST(Admission, CgroupV1ReadsTheHierarchicalLimit) {
  TempDir dir;
  const fs::path sys = dir.path();
  const fs::path cg = sys / "memory/process_api/abc";
  write(cg / "memory.limit_in_bytes", "9223372036854771712\n");  // this level: no limit
  write(cg / "memory.usage_in_bytes", std::to_string(400ull << 20) + "\n");
  write(cg / "memory.stat", "cache 5\nhierarchical_memory_limit " + std::to_string(1ull << 30) +
                                "\ntotal_cache " + std::to_string(100ull << 20) +
                                "\ntotal_shmem 0\n");
  const std::optional<MemoryRoom> room =
      cgroup_room(sys, "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n");
  ASSERT_TRUE(room.has_value());
  EXPECT_EQ(room->bytes, (1024ull - 300) << 20);
  // The same file system with no limit set: none.
  write(cg / "memory.stat", "hierarchical_memory_limit 9223372036854771712\n");
  EXPECT_FALSE(cgroup_room(sys, "4:memory:/process_api/abc\n").has_value());
}

TEST(Admission, RefusalNamesBothNumbers) {
  try {
    admit_shm(uint64_t{1} << 62, 0, "/", "the rank files of 1 rank");
    FAIL() << "4 EiB fit on /";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kMemory);
    const std::string text = e.what();
    EXPECT_NE(text.find("the rank files of 1 rank need " + std::to_string(uint64_t{1} << 62)),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("the free space of /"), std::string::npos) << text;
  }
  EXPECT_NO_THROW(admit_shm(0, 0, "/", "nothing"));
  EXPECT_NO_THROW(admit_memory(0, "nothing"));
}

}  // namespace
}  // namespace shardload
