// pread_exact / preadv_exact on real files: scatter over more segments than one preadv call takes,
// empty segments, and a file that ends early.
#include "format/posix_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "temp_dir.h"

namespace shardload::format {
namespace {

using testing::TempDir;

class PosixIo : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(7);
    bytes_.resize(1 << 20);
    for (std::byte& b : bytes_) b = static_cast<std::byte>(rng() & 0xFF);
    path_ = dir_.file("data.bin");
    testing::write_file(path_, bytes_);
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { ::close(fd_); }

  TempDir dir_;
  std::string path_;
  std::vector<std::byte> bytes_;
  int fd_ = -1;
};

TEST_F(PosixIo, ScatterFillsSegmentsInFileOrderAcrossManyCalls) {
  // 5000 segments of 0..96 bytes (some empty), written backwards into the output so that segment
  // order, not address order, decides where bytes go.
  std::mt19937 rng(11);
  std::vector<size_t> sizes(5000);
  size_t total = 0;
  for (size_t& s : sizes) total += s = rng() % 97;
  std::vector<std::byte> out(total);
  std::vector<iovec> segments;
  size_t end = total;
  for (size_t s : sizes) {
    end -= s;
    segments.push_back({out.data() + end, s});
  }
  const uint64_t offset = 1234;
  preadv_exact(fd_, segments, offset, {.file = path_});
  size_t at = offset;
  end = total;
  for (size_t s : sizes) {
    end -= s;
    for (size_t i = 0; i < s; ++i) ASSERT_EQ(out[end + i], bytes_[at + i]) << "segment byte " << i;
    at += s;
  }
}

TEST_F(PosixIo, ScatterPastTheEndOfTheFileIsAnIoErrorNamingTheFile) {
  std::vector<std::byte> out(4096);
  std::vector<iovec> segments{{out.data(), 2048}, {out.data() + 2048, 2048}};
  try {
    preadv_exact(fd_, segments, bytes_.size() - 3000, {.file = path_, .tensor = "w"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3000 bytes"), std::string::npos) << e.what();
  }
}

TEST_F(PosixIo, PreadPastTheEndIsAnIoError) {
  std::vector<std::byte> out(100);
  EXPECT_THROW(pread_exact(fd_, out, bytes_.size() - 10, {.file = path_}), Error);
}

}  // namespace
}  // namespace shardload::format
