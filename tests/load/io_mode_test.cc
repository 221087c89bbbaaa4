// The read paths (page cache, mmap, O_DIRECT through io_uring) produce the same rank bytes, auto
// picks by page-cache residency, and small neighbouring tensors share reads.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "core/fault_injection.h"
#include "load/direct_reader.h"
#include "load/file_access.h"
#include "shardload/error.h"
#include "shardload/loader.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

std::string make_model(const TempDir& dir, const std::string& arch,
                       const std::string& quant = "none", int experts = -1) {
  TinyOptions options;
  options.arch = arch;
  options.out = dir.file(arch + "-" + quant);
  options.seed = 5;
  options.quant = quant;
  options.experts = experts;
  make_tiny(options);
  return options.out;
}

// Drops a file's pages from the page cache (written back first, so that they are clean).
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double cached_fraction(const Checkpoint& ckpt) {
  std::vector<const SafetensorsFile*> files;
  for (const SafetensorsFile& file : ckpt.files()) files.push_back(&file);
  return load::page_cache_fraction(files);
}

bool direct_supported(const std::string& path) {
  const int fd = load::open_direct(path);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

std::vector<RankWeights> load_with(const Checkpoint& ckpt, const Plan& plan, IoMode io, int threads,
                                   LoadStats* stats = nullptr) {
  LoadOptions options;
  options.io = io;
  options.threads = threads;
  return load_ranks(ckpt, plan, options, stats);
}

void expect_same(const std::vector<RankWeights>& a, const std::vector<RankWeights>& b,
                 const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].buffer.size(), b[r].buffer.size());
    EXPECT_EQ(std::memcmp(a[r].buffer.data(), b[r].buffer.data(), a[r].buffer.size()), 0)
        << what << ", rank " << r;
  }
}

struct Case {
  const char* arch;
  const char* quant;
  int tp;
  int ep;
  std::optional<DType> dtype;  // a cast exercises the bounce path
};

class IoModeTest : public ::testing::TestWithParam<Case> {};

TEST_P(IoModeTest, EveryReadPathGivesTheSameBytes) {
  const Case& c = GetParam();
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, c.arch, c.quant));
  ParallelConfig parallel;
  parallel.tp = c.tp;
  parallel.ep = c.ep;
  parallel.dtype = c.dtype;
  const Plan plan = make_plan(ckpt, parallel);
  LoadStats stats;
  const std::vector<RankWeights> reference = load_with(ckpt, plan, IoMode::kPread, 1, &stats);
  EXPECT_EQ(stats.io, IoMode::kPread);
  for (int threads : {1, 3}) {
    expect_same(load_with(ckpt, plan, IoMode::kMmap, threads, &stats), reference, "mmap");
    EXPECT_EQ(stats.io, IoMode::kMmap);
    if (direct_supported(ckpt.files()[0].path())) {
      expect_same(load_with(ckpt, plan, IoMode::kDirect, threads, &stats), reference, "direct");
      EXPECT_EQ(stats.io, IoMode::kDirect);
    }
    expect_same(load_with(ckpt, plan, IoMode::kAuto, threads), reference, "auto");
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, IoModeTest,
                         ::testing::Values(Case{"qwen3_moe", "none", 4, 2, std::nullopt},
                                           Case{"qwen3_moe", "none", 2, 1, DType::kF16},
                                           Case{"llama", "none", 2, 1, DType::kF32},
                                           Case{"deepseek_v3", "fp8-block", 2, 2, std::nullopt},
                                           Case{"mixtral", "fp8", 4, 1, std::nullopt},
                                           Case{"qwen2_moe", "none", 4, 4, std::nullopt}),
                         [](const auto& info) {
                           return std::string(info.param.arch) + "_tp" +
                                  std::to_string(info.param.tp) + "_ep" +
                                  std::to_string(info.param.ep) + (info.param.dtype ? "_cast" : "");
                         });

TEST(IoModeAutoTest, ReadsCachedFilesThroughThePageCacheAndEvictedOnesDirect) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe"));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  LoadStats stats;
  const std::vector<RankWeights> cached = load_with(ckpt, plan, IoMode::kAuto, 2, &stats);
  // Just written: in the page cache, copied out of mappings where every file maps as huge pages.
  std::vector<const SafetensorsFile*> files;
  for (const SafetensorsFile& file : ckpt.files()) files.push_back(&file);
  EXPECT_EQ(stats.io, load::maps_as_huge_pages(files) ? IoMode::kMmap : IoMode::kPread);
  if (!direct_supported(ckpt.files()[0].path())) GTEST_SKIP() << "no O_DIRECT on this file system";
  for (const SafetensorsFile& file : ckpt.files()) evict(file.path());
  if (cached_fraction(ckpt) >= 0.5) GTEST_SKIP() << "this kernel kept the pages cached";
  const std::vector<RankWeights> cold = load_with(ckpt, plan, IoMode::kAuto, 2, &stats);
  EXPECT_EQ(stats.io, IoMode::kDirect);
  expect_same(cold, cached, "cold auto");
  // O_DIRECT does not fill the page cache: the next load is cold again.
  EXPECT_LT(cached_fraction(ckpt), 0.5);
}

TEST(IoModeCoalescingTest, NeighbouringSmallTensorsShareReads) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe", "none", 64));
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  LoadStats stats;
  load_with(ckpt, plan, IoMode::kPread, 2, &stats);
  ASSERT_GT(ckpt.tensor_names().size(), 500u);
  // Runs of expert tensors are read together; only the float32 q/k norms (a cast: bounce reads)
  // break the runs, a few per layer.
  EXPECT_LT(stats.read_requests * 10, ckpt.tensor_names().size());
}

// Ranks that hold the same rows (replicated norms, kv heads shared at tp 4 with 2 kv heads) get them
// from one read: every byte of the checkpoint is read once.
TEST(IoModeCoalescingTest, ReplicatedRowsAreReadOnce) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "qwen3_moe"));
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(ckpt, parallel);
  uint64_t data_bytes = 0;
  for (const SafetensorsFile& file : ckpt.files()) data_bytes += file.header().data_bytes();
  for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
    LoadStats stats;
    load_with(ckpt, plan, io, 2, &stats);
    EXPECT_EQ(stats.bytes_read, data_bytes) << io_mode_name(io);
    EXPECT_GT(stats.bytes_written, stats.bytes_read) << io_mode_name(io);  // replicas written
  }
}

TEST(IoModeErrorTest, DirectReadOfATruncatedFileNamesFileAndTensor) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, "llama"));
  if (!direct_supported(ckpt.files()[0].path())) GTEST_SKIP() << "no O_DIRECT on this file system";
  const Plan plan = make_plan(ckpt, ParallelConfig{});
  const std::string& victim = ckpt.files().back().path();
  ASSERT_EQ(truncate(victim.c_str(), static_cast<off_t>(ckpt.files().back().file_size() / 2)), 0);
  for (IoMode io : {IoMode::kDirect, IoMode::kMmap, IoMode::kPread}) {
    try {
      load_with(ckpt, plan, io, 2);
      FAIL() << io_mode_name(io) << ": a truncated file loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << io_mode_name(io);
      EXPECT_EQ(e.file(), victim) << io_mode_name(io);
      EXPECT_FALSE(e.tensor().empty()) << io_mode_name(io);
    }
  }
}

// A file cut short while the loader copies out of a mapping of it raises SIGBUS in the copy: the
// load fails with an I/O error naming the file and a tensor, and the process goes on.
TEST(IoModeErrorTest, AFileTruncatedWhileMappedIsAnIoError) {
  for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
    TempDir dir;
    const Checkpoint ckpt = Checkpoint::open(make_model(dir, "llama"));
    ParallelConfig parallel;
    parallel.dtype = DType::kF32;  // a cast: the page-cache path copies every read job out of a mapping
    const Plan plan = make_plan(ckpt, parallel);
    LoadStats stats;
    load_with(ckpt, plan, io, 1, &stats);
    ASSERT_GE(stats.read_requests, 2u);  // a read job after the one that truncates
    fault::after_bytes_read(1, [&] {
      for (const SafetensorsFile& file : ckpt.files()) {
        ASSERT_EQ(truncate(file.path().c_str(), static_cast<off_t>(file.header().data_start)), 0);
      }
    });
    try {
      load_with(ckpt, plan, io, 1);
      FAIL() << io_mode_name(io) << ": a truncated file loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << io_mode_name(io);
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
      EXPECT_FALSE(e.file().empty()) << io_mode_name(io);
      EXPECT_FALSE(e.tensor().empty()) << io_mode_name(io);
    }
    fault::after_bytes_read(0, nullptr);
  }
}

// The reader widens unaligned ranges to the block size and hands back the requested bytes, with
// several reads in flight, through io_uring and through its synchronous fallback alike.
TEST(DirectReaderTest, UnalignedRangesComeBackExactWithSeveralInFlight) {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  std::vector<std::byte> bytes(3 * 1024 * 1024 + 123);
  std::mt19937_64 rng(7);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
  ::shardload::testing::write_file(path, bytes);
  load::UniqueFd fd;
  fd.reset(load::open_direct(path));
  if (fd.get() < 0) GTEST_SKIP() << "no O_DIRECT on this file system";
  for (bool ring : {true, false}) {
    load::DirectReader reader(3, 1 << 20, ring);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // includes the file's unaligned tail
    for (int i = 0; i < 40; ++i) {
      const uint64_t length = 1 + rng() % (1 << 20);
      ranges.emplace_back(rng() % (bytes.size() - length + 1), length);
    }
    ranges.emplace_back(bytes.size() - 5000, 5000);
    size_t next = 0;
    size_t checked = 0;
    while (checked < ranges.size()) {
      while (!reader.full() && next < ranges.size()) {
        reader.submit(fd.get(), ranges[next].first, ranges[next].second, next, {.file = path});
        ++next;
      }
      const load::DirectReader::Done done = reader.wait_oldest();
      ASSERT_EQ(done.tag, checked);
      const auto [offset, length] = ranges[checked];
      EXPECT_EQ(std::memcmp(done.data, bytes.data() + offset, length), 0) << "range " << checked;
      reader.pop_oldest();
      ++checked;
    }
    EXPECT_TRUE(reader.empty());
  }
}

TEST(DirectReaderTest, ARangePastTheEndIsAnIoError) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  ::shardload::testing::write_file(path, std::string(10000, 'x'));
  load::UniqueFd fd;
  fd.reset(load::open_direct(path));
  if (fd.get() < 0) GTEST_SKIP() << "no O_DIRECT on this file system";
  for (bool ring : {true, false}) {
    load::DirectReader reader(2, 1 << 16, ring);
    reader.submit(fd.get(), 9000, 2000, 0, {.file = path, .tensor = "t"});
    try {
      reader.wait_oldest();
      FAIL() << "read past the end succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_EQ(e.tensor(), "t");
    }
  }
}

}  // namespace
}  // namespace shardload
