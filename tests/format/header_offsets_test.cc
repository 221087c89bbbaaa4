// Header validation of data_offsets, sizes and the file size, the valid edge cases the crate
// accepts, and parsing speed.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "safetensors_bytes.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {
namespace {

using testing::safetensors_file;

constexpr std::string_view kShardFile = "shard.safetensors";

SafetensorsHeader parse_shard(const std::string& bytes) {
  return parse_safetensors_header(std::as_bytes(std::span(bytes.data(), bytes.size())),
                                  bytes.size(), kShardFile);
}

Error parse_error(const std::string& bytes) {
  try {
    parse_shard(bytes);
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "parsed without error";
  return Error(ErrorKind::kInvalidArgument, "no error");
}

std::string tensor(std::string_view name, std::string_view dtype, std::string_view shape,
                   uint64_t begin, uint64_t end) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":[{},{}]}})", name, dtype,
                     shape, begin, end);
}

TEST(HeaderOffsets, FirstTensorMustStartAtZero) {
  const Error error =
      parse_error(safetensors_file("{" + tensor("w", "F32", "[2]", 4, 12) + "}", 12));
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidOffsets) << error.what();
  EXPECT_EQ(error.tensor(), "w");
  EXPECT_EQ(error.field(), "data_offsets");
  EXPECT_EQ(error.expected(), "[0, 8]");
  EXPECT_EQ(error.found(), "[4, 12]");
}

TEST(HeaderOffsets, HoleBetweenTensorsIsRejected) {
  const std::string json =
      "{" + tensor("a", "F32", "[1]", 0, 4) + "," + tensor("b", "F32", "[1]", 8, 12) + "}";
  const Error error = parse_error(safetensors_file(json, 12));
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidOffsets) << error.what();
  EXPECT_EQ(error.tensor(), "b");
  EXPECT_EQ(error.expected(), "[4, 8]");
  EXPECT_EQ(error.found(), "[8, 12]");
}

TEST(HeaderOffsets, OverlapIsRejected) {
  const std::string json =
      "{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 4, 12) + "}";
  const Error error = parse_error(safetensors_file(json, 12));
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidOffsets) << error.what();
  EXPECT_EQ(error.tensor(), "b");
  EXPECT_EQ(error.found(), "[4, 12]");
}

TEST(HeaderOffsets, TwoTensorsOnTheSameBytesAreRejected) {
  const std::string json =
      "{" + tensor("a", "F32", "[1]", 0, 4) + "," + tensor("b", "F32", "[1]", 0, 4) + "}";
  EXPECT_EQ(parse_error(safetensors_file(json, 8)).kind(), ErrorKind::kInvalidOffsets);
}

TEST(HeaderOffsets, EndBeforeBeginIsRejected) {
  const std::string json =
      "{" + tensor("a", "U8", "[4]", 0, 4) + "," + tensor("b", "U8", "[0]", 4, 2) + "}";
  const Error error = parse_error(safetensors_file(json, 4));
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidOffsets) << error.what();
  EXPECT_EQ(error.tensor(), "b");
  EXPECT_EQ(error.found(), "[4, 2]");
}

TEST(HeaderOffsets, MalformedOffsetsAreRejected) {
  for (std::string_view offsets :
       {"[0]", "[]", "[0,4,8]", "[-1,4]", "[0,4.0]", "[\"0\",4]", "[0,[4]]", "{\"begin\":0}", "4",
        "null", "[0,18446744073709551616]"}) {
    const std::string json =
        fmt::format(R"({{"w":{{"dtype":"F32","shape":[],"data_offsets":{}}}}})", offsets);
    const Error error = parse_error(safetensors_file(json, 4));
    EXPECT_EQ(error.kind(), ErrorKind::kInvalidOffsets) << offsets << ": " << error.what();
    EXPECT_EQ(error.tensor(), "w");
    EXPECT_EQ(error.field(), "data_offsets");
  }
}

TEST(HeaderSizes, LengthMustMatchShapeTimesDtype) {
  // The crate's example: a 2x2 I32 tensor given 4 bytes.
  const Error error =
      parse_error(safetensors_file("{" + tensor("test", "I32", "[2,2]", 0, 4) + "}", 4));
  EXPECT_EQ(error.kind(), ErrorKind::kSizeMismatch) << error.what();
  EXPECT_EQ(error.tensor(), "test");
  EXPECT_EQ(error.field(), "data_offsets");
  EXPECT_EQ(error.expected(), "[0, 16]");
  EXPECT_EQ(error.found(), "[0, 4]");
}

TEST(HeaderSizes, SubByteDtypesMustFillWholeBytes) {
  const Error odd_f4 =
      parse_error(safetensors_file("{" + tensor("q", "F4", "[1,3]", 0, 2) + "}", 2));
  EXPECT_EQ(odd_f4.kind(), ErrorKind::kSizeMismatch) << odd_f4.what();
  EXPECT_EQ(odd_f4.tensor(), "q");
  EXPECT_EQ(odd_f4.field(), "shape");
  EXPECT_EQ(
      parse_error(safetensors_file("{" + tensor("q", "F6_E2M3", "[3]", 0, 3) + "}", 3)).kind(),
      ErrorKind::kSizeMismatch);
  // Whole bytes are fine: 2 x F4 = 1 byte, 4 x F6 = 3 bytes.
  EXPECT_EQ(
      parse_shard(safetensors_file("{" + tensor("q", "F4", "[1,2]", 0, 1) + "}", 1)).data_bytes(),
      1u);
  EXPECT_EQ(parse_shard(safetensors_file("{" + tensor("q", "F6_E3M2", "[4]", 0, 3) + "}", 3))
                .data_bytes(),
            3u);
}

TEST(HeaderFileSize, DataMustEndAtTheEndOfTheFile) {
  const std::string json = "{" + tensor("test", "I32", "[2,2]", 0, 16) + "}";
  const Error extra =
      parse_error(safetensors_file(json, 16) + "extra_bogus_data_for_polyglot_file");
  EXPECT_EQ(extra.kind(), ErrorKind::kFileSize) << extra.what();
  EXPECT_EQ(extra.field(), "file_size");
  const Error missing = parse_error(safetensors_file(json, 14));
  EXPECT_EQ(missing.kind(), ErrorKind::kFileSize) << missing.what();
  EXPECT_EQ(missing.expected(), fmt::format("{} bytes", 8 + json.size() + 16));
  EXPECT_EQ(parse_error(safetensors_file("{}", 1)).kind(), ErrorKind::kFileSize);
}

TEST(HeaderValid, SortsTensorsByOffsetAndIndexesThem) {
  const std::string json = "{" + tensor("c", "U8", "[2]", 12, 14) + "," +
                           tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "I32", "[]", 8, 12) +
                           "}";
  const SafetensorsHeader header = parse_shard(safetensors_file(json, 14));
  ASSERT_EQ(header.tensors.size(), 3u);
  EXPECT_EQ(header.tensors[0].name, "a");
  EXPECT_EQ(header.tensors[1].name, "b");
  EXPECT_EQ(header.tensors[2].name, "c");
  EXPECT_EQ(header.header_bytes, json.size());
  EXPECT_EQ(header.data_start, 8 + json.size());
  EXPECT_EQ(header.data_bytes(), 14u);
  for (const TensorInfo& info : header.tensors) {
    ASSERT_NE(header.find(info.name), nullptr);
    EXPECT_EQ(header.find(info.name), &info);
  }
  EXPECT_EQ(header.find("d"), nullptr);
  EXPECT_EQ(header.find(""), nullptr);
}

// find() searches the names in sorted order, whatever order the text and the offsets give them:
// here offsets run against the names, and dtypes alternate.
TEST(HeaderValid, FindsEveryNameInAnyOrder) {
  std::string json = "{";
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    names.push_back(fmt::format("layer.{}.w", 39 - i));
    if (i > 0) json += ",";
    json += tensor(names.back(), i % 2 == 0 ? "U8" : "I8", "[2]", 2 * i, 2 * i + 2);
  }
  json += "}";
  const SafetensorsHeader header = parse_shard(safetensors_file(json, 80));
  ASSERT_EQ(header.tensors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo* info = header.find(names[i]);
    ASSERT_NE(info, nullptr) << names[i];
    EXPECT_EQ(info, &header.tensors[i]);
    EXPECT_EQ(info->dtype, i % 2 == 0 ? DType::kU8 : DType::kI8);
  }
  EXPECT_EQ(header.find("layer.4.v"), nullptr);
  EXPECT_EQ(header.find("layer.40.w"), nullptr);
  EXPECT_EQ(header.find("layer"), nullptr);
}

TEST(HeaderValid, ZeroSizeTensorsAnywhere) {
  const std::string json =
      "{" + tensor("empty_first", "F32", "[0,4]", 0, 0) + "," + tensor("w", "F16", "[2]", 0, 4) +
      "," + tensor("empty_mid", "I64", "[3,0]", 4, 4) + "," + tensor("v", "U8", "[1]", 4, 5) + "," +
      tensor("empty_end", "BF16", "[0]", 5, 5) + "," + tensor("also_empty_end", "F4", "[0]", 5, 5) +
      "}";
  const SafetensorsHeader header = parse_shard(safetensors_file(json, 5));
  ASSERT_EQ(header.tensors.size(), 6u);
  EXPECT_EQ(header.find("empty_mid")->nbytes(), 0u);
  EXPECT_EQ(header.find("empty_mid")->shape, (Shape{3, 0}));
  EXPECT_EQ(header.tensors.back().name, "empty_end");  // ties broken by name
}

TEST(HeaderValid, ScalarHasAnEmptyShape) {
  const SafetensorsHeader header =
      parse_shard(safetensors_file("{" + tensor("test", "I32", "[]", 0, 4) + "}", 4));
  EXPECT_TRUE(header.tensors.at(0).shape.empty());
  EXPECT_EQ(header.tensors.at(0).nbytes(), 4u);
}

TEST(HeaderValid, EmptyAndMetadataOnlyHeaders) {
  EXPECT_TRUE(parse_shard(safetensors_file("{}")).tensors.empty());
  EXPECT_EQ(parse_shard(safetensors_file("{}      ")).data_start, 16u);
  const SafetensorsHeader header =
      parse_shard(safetensors_file(R"({"__metadata__":{"format":"pt"}})"));
  EXPECT_TRUE(header.tensors.empty());
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.data_bytes(), 0u);
}

TEST(HeaderValid, WhitespaceAroundTheObject) {
  // The crate's examples: JSON whitespace may lead or trail (writers pad with spaces).
  EXPECT_NO_THROW(parse_shard(safetensors_file("{}\r \t\n")));
  EXPECT_NO_THROW(parse_shard(safetensors_file("\t\n{}\r ")));
  const std::string json = "{" + tensor("w", "U8", "[1]", 0, 1) + "}" + std::string(7, ' ');
  EXPECT_EQ(parse_shard(safetensors_file(json, 1)).tensors.size(), 1u);
}

TEST(HeaderValid, OddNamesAreKept) {
  const std::string json = R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a\"b\\c\u0000":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  const SafetensorsHeader header = parse_shard(safetensors_file(json, 2));
  ASSERT_NE(header.find(""), nullptr);
  ASSERT_NE(header.find(std::string_view("a\"b\\c\0", 6)), nullptr);
}

// Speed is measured in bench/header_bench.cc; here only that a 20k-tensor header in either order
// parses to the same sorted, indexed result.
TEST(HeaderLarge, TwentyThousandTensorsInAnyOrder) {
  const size_t count = 20'000;
  std::vector<std::string> entries;
  for (size_t i = 0; i < count; ++i) {
    entries.push_back(
        tensor(fmt::format("model.layers.{}.mlp.experts.{}.down_proj.weight", i / 128, i % 128),
               "BF16", "[2,4]", 16 * i, 16 * (i + 1)));
  }
  const auto file_of = [&](const std::vector<std::string>& in_order) {
    return safetensors_file(
        fmt::format(R"({{"__metadata__":{{"format":"pt"}},{}}})", fmt::join(in_order, ",")),
        16 * count);
  };
  const SafetensorsHeader sorted = parse_shard(file_of(entries));
  std::reverse(entries.begin(), entries.end());  // makes the parser sort and re-index
  const SafetensorsHeader reversed = parse_shard(file_of(entries));
  ASSERT_EQ(sorted.tensors.size(), count);
  ASSERT_EQ(reversed.tensors.size(), count);
  for (size_t i = 0; i < count; i += 997) {
    EXPECT_EQ(sorted.tensors[i].name, reversed.tensors[i].name);
    EXPECT_EQ(reversed.tensors[i].begin, 16 * i);
    ASSERT_NE(reversed.find(reversed.tensors[i].name), nullptr);
    EXPECT_EQ(reversed.find(reversed.tensors[i].name)->begin, 16 * i);
  }
}

}  // namespace
}  // namespace shardload
