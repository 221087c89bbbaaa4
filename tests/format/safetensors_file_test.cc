// SafetensorsFile (pread and mmap back ends) and write_safetensors, through real files in a temp
// directory.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using testing::TempDir;

std::vector<std::byte> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  return out;
}

std::vector<std::byte> read_all(const SafetensorsFile& file, const TensorInfo& info) {
  std::vector<std::byte> out(info.nbytes());
  file.read(info, out);
  return out;
}

struct Fixture {
  std::vector<std::vector<std::byte>> data;
  std::vector<TensorToWrite> tensors;
};

Fixture make_fixture(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::tuple<std::string, DType, Shape>> specs = {
      {"model.embed_tokens.weight", DType::kBF16, {7, 3}},
      {"model.norm.weight", DType::kF32, {5}},
      {"lm_head.weight", DType::kF16, {3, 4}},
      {"position_ids", DType::kI64, {2, 2}},
      {"scale", DType::kF64, {}},
      {"mask", DType::kBool, {9}},
      {"fp8.weight", DType::kF8E4M3, {16}},
      {"fp8.scale_inv", DType::kF32, {1}},
      {"packed", DType::kF4, {2, 3}},
      {"empty", DType::kU8, {0, 4}},
      {"complex", DType::kC64, {2}},
  };
  Fixture fixture;
  fixture.data.reserve(specs.size());
  for (const auto& [name, dtype, shape] : specs) {
    fixture.data.push_back(random_bytes(shape_nbytes(shape, dtype), rng));
    fixture.tensors.push_back(
        {.name = name, .dtype = dtype, .shape = shape, .data = fixture.data.back()});
  }
  return fixture;
}

Error open_error(const std::string& path, IoBackend backend) {
  try {
    SafetensorsFile::open(path, backend);
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "opened " << path;
  return Error(ErrorKind::kInvalidArgument, "none");
}

class SafetensorsFileTest : public ::testing::TestWithParam<IoBackend> {};

INSTANTIATE_TEST_SUITE_P(Backends, SafetensorsFileTest,
                         ::testing::Values(IoBackend::kPread, IoBackend::kMmap),
                         [](const auto& info) {
                           return info.param == IoBackend::kPread ? "Pread" : "Mmap";
                         });

TEST_P(SafetensorsFileTest, RoundTripsTensorsAndMetadata) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const Fixture fixture = make_fixture(seed);
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"source", "shardload test"}};
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, fixture.tensors, metadata);

  const SafetensorsFile file = SafetensorsFile::open(path, GetParam());
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.backend(), GetParam());
  EXPECT_EQ(file.file_size(), std::filesystem::file_size(path));
  EXPECT_EQ(file.header().metadata, metadata);
  EXPECT_EQ(file.header().data_start % 8, 0u);
  ASSERT_EQ(file.header().tensors.size(), fixture.tensors.size());
  for (const TensorToWrite& written : fixture.tensors) {
    const TensorInfo* info = file.header().find(written.name);
    ASSERT_NE(info, nullptr) << written.name;
    EXPECT_EQ(info->dtype, written.dtype);
    EXPECT_EQ(info->shape, written.shape);
    const std::vector<std::byte> expected(written.data.begin(), written.data.end());
    EXPECT_EQ(read_all(file, *info), expected) << written.name;
    if (info->nbytes() > 2) {  // a range inside the tensor
      std::vector<std::byte> middle(info->nbytes() - 2);
      file.read(*info, 1, middle);
      EXPECT_TRUE(std::equal(middle.begin(), middle.end(), expected.begin() + 1)) << written.name;
    }
  }
}

TEST_P(SafetensorsFileTest, LargeTensorsAmongSmallOnes) {
  std::mt19937_64 rng(7);
  const std::vector<std::byte> big = random_bytes(3 * 1024 * 1024 + 5, rng);
  std::vector<std::vector<std::byte>> small;
  std::vector<TensorToWrite> tensors = {
      {.name = "big", .dtype = DType::kU8, .shape = {big.size()}, .data = big}};
  for (int i = 0; i < 300; ++i) small.push_back(random_bytes(4096 + i, rng));
  for (int i = 0; i < 300; ++i) {
    tensors.push_back({.name = "small." + std::to_string(i),
                       .dtype = DType::kU8,
                       .shape = {small[i].size()},
                       .data = small[i]});
  }
  TempDir dir;
  write_safetensors(dir.file("big.safetensors"), tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("big.safetensors"), GetParam());
  EXPECT_EQ(read_all(file, *file.header().find("big")), big);
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(read_all(file, *file.header().find("small." + std::to_string(i))), small[i]) << i;
  }
}

TEST_P(SafetensorsFileTest, ReadOutsideTheTensorIsRejected) {
  const Fixture fixture = make_fixture(1);
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), fixture.tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("m.safetensors"), GetParam());
  const TensorInfo& info = *file.header().find("model.norm.weight");  // 20 bytes
  std::vector<std::byte> buffer(8);
  EXPECT_NO_THROW(file.read(info, 12, buffer));
  try {
    file.read(info, 13, buffer);
    FAIL() << "read past the tensor";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(error.tensor(), "model.norm.weight");
  }
  EXPECT_THROW(file.read(info, UINT64_MAX - 2, buffer), Error);
  TensorInfo foreign = info;
  foreign.end = file.file_size();  // not a tensor of this file
  EXPECT_THROW(file.read(foreign, 0, buffer), Error);
}

TEST_P(SafetensorsFileTest, CorruptFilesAreReportedWithTheirPath) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto expect_open_error = [&](std::string_view bytes, ErrorKind kind) {
    testing::write_file(path, bytes);
    const Error error = open_error(path, GetParam());
    EXPECT_EQ(error.kind(), kind) << error.what();
    EXPECT_EQ(error.file(), path);
  };
  expect_open_error("", ErrorKind::kHeaderTooSmall);
  expect_open_error("\x02\0\0", ErrorKind::kHeaderTooSmall);
  expect_open_error(std::string(8, '\xFF') + "{}", ErrorKind::kHeaderTooLarge);
  expect_open_error(std::string("\x10\0\0\0\0\0\0\0{}", 10), ErrorKind::kHeaderLength);
  expect_open_error(std::string("\x02\0\0\0\0\0\0\0{}", 10) + "x", ErrorKind::kFileSize);
  const std::string json = R"({"w":{"dtype":"X","shape":[],"data_offsets":[0,0]}})";
  expect_open_error(std::string(1, static_cast<char>(json.size())) + std::string(7, '\0') + json,
                    ErrorKind::kUnknownDtype);
}

TEST_P(SafetensorsFileTest, MissingFilesAndDirectoriesAreIoErrors) {
  TempDir dir;
  EXPECT_EQ(open_error(dir.file("absent.safetensors"), GetParam()).kind(), ErrorKind::kIo);
  const Error error = open_error(dir.path().string(), GetParam());
  EXPECT_EQ(error.kind(), ErrorKind::kIo);
  EXPECT_EQ(error.file(), dir.path().string());
}

TEST_P(SafetensorsFileTest, MovingKeepsTensorInfoAddresses) {
  const Fixture fixture = make_fixture(2);
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), fixture.tensors);
  SafetensorsFile first = SafetensorsFile::open(dir.file("m.safetensors"), GetParam());
  const TensorInfo* info = first.header().find("lm_head.weight");
  std::vector<SafetensorsFile> files;
  files.push_back(std::move(first));
  files.push_back(SafetensorsFile::open(dir.file("m.safetensors"), GetParam()));  // may reallocate
  EXPECT_EQ(files[0].header().find("lm_head.weight"), info);
  EXPECT_EQ(read_all(files[0], *info).size(), 24u);
  files[1] = std::move(files[0]);
  EXPECT_EQ(read_all(files[1], *info).size(), 24u);
}

TEST(SafetensorsFile, MmapViewsAreZeroCopy) {
  const Fixture fixture = make_fixture(3);
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), fixture.tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("m.safetensors"), IoBackend::kMmap);
  for (const TensorToWrite& written : fixture.tensors) {
    const TensorInfo& info = *file.header().find(written.name);
    const TensorView view = file.view(info);
    EXPECT_EQ(view.dtype, written.dtype);
    EXPECT_EQ(view.shape, written.shape);
    ASSERT_EQ(view.data.size(), written.data.size());
    EXPECT_TRUE(std::equal(view.data.begin(), view.data.end(), written.data.begin()));
    EXPECT_EQ(file.view(info).data.data(), view.data.data());  // the mapping itself, not a copy
  }
}

TEST(SafetensorsFile, ViewNeedsTheMmapBackend) {
  const Fixture fixture = make_fixture(4);
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), fixture.tensors);
  const SafetensorsFile file = SafetensorsFile::open(dir.file("m.safetensors"), IoBackend::kPread);
  try {
    file.view(file.header().tensors.at(0));
    FAIL() << "view without mmap";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument);
  }
}

TEST(SafetensorsFile, FileTruncatedAfterOpenIsAnIoErrorNamingTheTensor) {
  const Fixture fixture = make_fixture(5);
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, fixture.tensors);
  const SafetensorsFile file = SafetensorsFile::open(path, IoBackend::kPread);
  const TensorInfo& last = file.header().tensors.back();
  ASSERT_GT(last.nbytes(), 1u);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(file.header().data_start + last.begin + 1)),
            0);
  try {
    read_all(file, last);
    FAIL() << "read a truncated tensor";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kIo);
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.tensor(), last.name);
  }
}

TEST(WriteSafetensors, ReplacesAtomicallyAndLeavesNoTemporaryFile) {
  const Fixture fixture = make_fixture(6);
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, fixture.tensors);
  // A mapping of the old file stays valid: the new file is written beside it and renamed over it.
  const SafetensorsFile old_file = SafetensorsFile::open(path, IoBackend::kMmap);
  const TensorView old_view = old_file.view(*old_file.header().find("scale"));
  const std::vector<std::byte> old_bytes(old_view.data.begin(), old_view.data.end());
  write_safetensors(path, {fixture.tensors[0]}, {{"version", "2"}});
  EXPECT_TRUE(std::equal(old_view.data.begin(), old_view.data.end(), old_bytes.begin()));
  EXPECT_EQ(SafetensorsFile::open(path).header().tensors.size(), 1u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(WriteSafetensors, CreatesFilesWithTheUmaskPermissions) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path, {});
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST(WriteSafetensors, ErrorsNameTheFileAndWriteNothing) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<std::byte> three(3);
  try {
    write_safetensors(path, {{.name = "w", .dtype = DType::kF32, .shape = {1}, .data = three}});
    FAIL() << "wrote a tensor with the wrong size";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.tensor(), "w");
  }
  try {
    write_safetensors(dir.file("missing/m.safetensors"), {});
    FAIL() << "wrote into a missing directory";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kIo);
    EXPECT_EQ(error.file(), dir.file("missing/m.safetensors"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace shardload
