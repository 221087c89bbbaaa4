#include "shardload/checkpoint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <vector>

#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// Writes a shard holding one F32 [2] tensor per name, each with distinct values.
void write_shard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<std::array<float, 2>> values;
  values.reserve(names.size());
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    values.push_back({static_cast<float>(i), static_cast<float>(i) + 0.5f});
    tensors.push_back({names[i], DType::kF32, {2}, std::as_bytes(std::span(values.back()))});
  }
  write_safetensors(path, tensors);
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, file] : weight_map) index["weight_map"][name] = file;
  return index.dump();
}

// A sharded model: a and b in shard 1, c in shard 2, with config and index.
void write_sharded_model(const TempDir& dir) {
  write_file(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"]})");
  write_shard(dir.file("model-00001-of-00002.safetensors"), {"a", "b"});
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"c"});
  write_file(dir.file("model.safetensors.index.json"),
             index_json({{"a", "model-00001-of-00002.safetensors"},
                         {"b", "model-00001-of-00002.safetensors"},
                         {"c", "model-00002-of-00002.safetensors"}}));
}

ErrorKind open_error_kind(const std::string& path, std::string* message = nullptr) {
  try {
    Checkpoint::open(path);
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "opening " << path << " did not fail";
  return ErrorKind::kInvalidArgument;
}

TEST(CheckpointTest, OpensASingleFile) {
  TempDir dir;
  write_shard(dir.file("weights.safetensors"), {"x", "y"});
  const Checkpoint ckpt = Checkpoint::open(dir.file("weights.safetensors"));
  EXPECT_FALSE(ckpt.is_directory());
  EXPECT_FALSE(ckpt.has_config());
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"x", "y"}));
}

TEST(CheckpointTest, OpensADirectoryWithOneModelFile) {
  TempDir dir;
  write_file(dir.file("config.json"), R"({"architectures": ["Qwen3ForCausalLM"]})");
  write_shard(dir.file("model.safetensors"), {"w"});
  const Checkpoint ckpt = Checkpoint::open(dir.path().string());
  EXPECT_TRUE(ckpt.is_directory());
  EXPECT_EQ(ckpt.config()["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"w"}));
  EXPECT_TRUE(ckpt.warnings().empty());
}

TEST(CheckpointTest, OpensAShardedModelAndFindsEachTensorInItsFile) {
  TempDir dir;
  write_sharded_model(dir);
  const Checkpoint ckpt = Checkpoint::open(dir.path().string());
  ASSERT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_NE(ckpt.files()[ckpt.at("c").file].path().find("00002-of"), std::string::npos);
  EXPECT_EQ(ckpt.at("b").info->shape, (Shape{2}));
  std::array<float, 2> b{};
  ckpt.files()[ckpt.at("b").file].read(*ckpt.at("b").info, std::as_writable_bytes(std::span(b)));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 1.5f);
  EXPECT_EQ(ckpt.find("missing"), nullptr);
  try {
    ckpt.at("missing");
    FAIL() << "at() of a missing tensor did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTensorNotFound);
    EXPECT_EQ(e.tensor(), "missing");
  }
}

TEST(CheckpointTest, IgnoresSafetensorsTheIndexDoesNotNameWithAWarning) {
  TempDir dir;
  write_sharded_model(dir);
  write_shard(dir.file("consolidated.safetensors"), {"a", "b", "c"});
  const Checkpoint ckpt = Checkpoint::open(dir.path().string());
  EXPECT_EQ(ckpt.files().size(), 2u);
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  EXPECT_NE(ckpt.warnings()[0].find("consolidated.safetensors"), std::string::npos);
}

// JSON keeps the last of repeated keys: a file named only by an overwritten entry is not part of
// the model (here a stale shard holding an old copy of c), as with Python's json.
TEST(CheckpointTest, AFileNamedOnlyByAnOverwrittenIndexEntryIsIgnored) {
  TempDir dir;
  write_file(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"]})");
  write_shard(dir.file("model-00001-of-00002.safetensors"), {"a", "b"});
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"c"});
  write_shard(dir.file("stale.safetensors"), {"c"});
  write_file(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)"
             R"( "b": "model-00001-of-00002.safetensors", "c": "stale.safetensors",)"
             R"( "c": "model-00002-of-00002.safetensors"}})");
  const Checkpoint ckpt = Checkpoint::open(dir.path().string());
  ASSERT_EQ(ckpt.files().size(), 2u);
  const Checkpoint::Entry* c = ckpt.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(ckpt.files()[c->file].path(), dir.file("model-00002-of-00002.safetensors"));
  ASSERT_EQ(ckpt.warnings().size(), 1u);
  EXPECT_NE(ckpt.warnings()[0].find("ignoring stale.safetensors"), std::string::npos)
      << ckpt.warnings()[0];
}

TEST(CheckpointTest, RejectsAnIndexNamingAMissingFile) {
  TempDir dir;
  write_sharded_model(dir);
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  std::string message;
  EXPECT_EQ(open_error_kind(dir.path().string(), &message), ErrorKind::kIndex);
  EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("'c'"), std::string::npos) << message;
}

TEST(CheckpointTest, RejectsAnIndexTensorMissingFromItsFile) {
  TempDir dir;
  write_sharded_model(dir);
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"d"});
  write_file(dir.file("model.safetensors.index.json"),
             index_json({{"a", "model-00001-of-00002.safetensors"},
                         {"b", "model-00001-of-00002.safetensors"},
                         {"c", "model-00002-of-00002.safetensors"},
                         {"d", "model-00002-of-00002.safetensors"}}));
  std::string message;
  EXPECT_EQ(open_error_kind(dir.path().string(), &message), ErrorKind::kIndex);
  EXPECT_NE(message.find("'c'"), std::string::npos) << message;
}

TEST(CheckpointTest, RejectsATensorInTwoFiles) {
  TempDir dir;
  write_sharded_model(dir);
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"a", "c"});
  std::string message;
  EXPECT_EQ(open_error_kind(dir.path().string(), &message), ErrorKind::kIndex);
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
}

TEST(CheckpointTest, RejectsATensorTheIndexDoesNotName) {
  TempDir dir;
  write_sharded_model(dir);
  write_shard(dir.file("model-00002-of-00002.safetensors"), {"c", "extra"});
  std::string message;
  EXPECT_EQ(open_error_kind(dir.path().string(), &message), ErrorKind::kIndex);
  EXPECT_NE(message.find("'extra'"), std::string::npos) << message;
}

TEST(CheckpointTest, RejectsAnIndexThatPointsOutsideTheDirectory) {
  TempDir dir;
  write_sharded_model(dir);
  write_file(dir.file("model.safetensors.index.json"),
             index_json({{"a", "../model-00001-of-00002.safetensors"}}));
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIndex);
}

TEST(CheckpointTest, RejectsMalformedIndexAndConfig) {
  TempDir dir;
  write_sharded_model(dir);
  write_file(dir.file("model.safetensors.index.json"), R"({"weight_map": [1, 2]})");
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIndex);
  write_file(dir.file("model.safetensors.index.json"), R"({"weight_map": {"a": 3}})");
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIndex);
  write_file(dir.file("model.safetensors.index.json"), "{not json");
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIndex);

  TempDir other;
  write_sharded_model(other);
  write_file(other.file("config.json"), "{\"architectures\": ");
  EXPECT_EQ(open_error_kind(other.path().string()), ErrorKind::kConfig);
  write_file(other.file("config.json"), "[1]");
  EXPECT_EQ(open_error_kind(other.path().string()), ErrorKind::kConfig);
}

TEST(CheckpointTest, RejectsSeveralFilesWithoutAnIndex) {
  TempDir dir;
  write_shard(dir.file("one.safetensors"), {"a"});
  write_shard(dir.file("two.safetensors"), {"b"});
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIndex);
}

TEST(CheckpointTest, RejectsAMissingPathAndAnEmptyDirectory) {
  TempDir dir;
  EXPECT_EQ(open_error_kind(dir.file("nope")), ErrorKind::kIo);
  EXPECT_EQ(open_error_kind(dir.path().string()), ErrorKind::kIo);
}

TEST(CheckpointTest, PropagatesAShardHeaderErrorNamingTheFile) {
  TempDir dir;
  write_sharded_model(dir);
  write_file(dir.file("model-00002-of-00002.safetensors"), std::string_view("\x04\0\0\0\0\0\0\0{}", 10));
  std::string message;
  open_error_kind(dir.path().string(), &message);
  EXPECT_NE(message.find("model-00002-of-00002.safetensors"), std::string::npos) << message;
}

}  // namespace
}  // namespace shardload
