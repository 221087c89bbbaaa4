// write_sparse_safetensors: the file write_safetensors writes for all-zero data, byte for byte,
// without writing the data (a hole), and no data accepted.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
namespace {

TEST(SparseWriter, IsTheDenseFileOfZerosWithoutItsBlocks) {
  testing::TempDir dir;
  const uint64_t big = uint64_t{64} << 20;
  const std::vector<std::byte> zeros(big);
  const std::vector<std::byte> small(6 * 4);
  const std::vector<TensorToWrite> dense = {
      {"b.weight", DType::kF8E4M3, {8192, 8192}, zeros},
      {"a.scale", DType::kF32, {2, 3}, small},
  };
  std::vector<TensorToWrite> sparse = dense;
  for (TensorToWrite& t : sparse) t.data = {};
  write_safetensors(dir.file("dense.safetensors"), dense, {{"format", "pt"}});
  write_sparse_safetensors(dir.file("sparse.safetensors"), sparse, {{"format", "pt"}});
  EXPECT_EQ(testing::read_file(dir.file("sparse.safetensors")),
            testing::read_file(dir.file("dense.safetensors")));

  struct stat st {};
  ASSERT_EQ(::stat(dir.file("sparse.safetensors").c_str(), &st), 0);
  EXPECT_GT(static_cast<uint64_t>(st.st_size), big);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{1} << 20) << "the data is a hole";
  const SafetensorsFile file = SafetensorsFile::open(dir.file("sparse.safetensors"));
  EXPECT_EQ(file.header().data_bytes(), big + small.size());
}

TEST(SparseWriter, RefusesData) {
  testing::TempDir dir;
  const std::vector<std::byte> data(4);
  try {
    write_sparse_safetensors(dir.file("x.safetensors"), {{"x", DType::kF32, {1}, data}});
    FAIL() << "data accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.tensor(), "x");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.safetensors")));
}

}  // namespace
}  // namespace shardload
