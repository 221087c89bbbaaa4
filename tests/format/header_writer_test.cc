// The header writer: byte-for-byte what the crate writes, ordering, padding, escaping and argument
// checks.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {
namespace {

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

std::vector<std::byte> f32_bytes(std::initializer_list<float> values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

TensorToWrite tensor(std::string name, DType dtype, Shape shape, std::span<const std::byte> data) {
  return TensorToWrite{
      .name = std::move(name), .dtype = dtype, .shape = std::move(shape), .data = data};
}

SafetensorsHeader parse_written(const std::string& header, uint64_t data_bytes) {
  std::string file(8, '\0');
  for (size_t i = 0; i < 8; ++i)
    file[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  file += header;
  file.append(data_bytes, '\0');
  return parse_safetensors_header(std::as_bytes(std::span(file.data(), file.size())), file.size());
}

// Expected bytes below are the outputs the crate's own serialisation tests pin down.
TEST(HeaderWriter, MatchesTheCrateForOneTensor) {
  const auto data = f32_bytes({0, 1, 2, 3, 4, 5});
  const std::string header =
      serialize_safetensors_header({tensor("attn.0", DType::kF32, {1, 2, 3}, data)}, {});
  EXPECT_EQ(header, R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})");
  EXPECT_EQ(header.size(), 64u);  // already a multiple of 8: no padding
}

TEST(HeaderWriter, MatchesTheCrateWhenPaddingIsNeeded) {
  const auto data = f32_bytes({0, 1, 2, 3, 4, 5});
  const std::string header =
      serialize_safetensors_header({tensor("attn0", DType::kF32, {1, 1, 2, 3}, data)}, {});
  EXPECT_EQ(header, R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                        std::string(7, ' '));
  const auto f4 = zeros(1);
  EXPECT_EQ(
      serialize_safetensors_header({tensor("attn.0", DType::kF4, {1, 2}, f4)}, {}),
      R"({"attn.0":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}})" + std::string(4, ' '));
}

TEST(HeaderWriter, MatchesTheCrateForEmptyFiles) {
  EXPECT_EQ(serialize_safetensors_header({}, {}), "{}      ");
  EXPECT_EQ(serialize_safetensors_header({}, {{"framework", "pt"}}),
            R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
}

TEST(HeaderWriter, PadsEveryLengthToAMultipleOfEight) {
  const auto data = zeros(1);
  for (size_t length = 0; length < 24; ++length) {
    const std::string header =
        serialize_safetensors_header({tensor(std::string(length, 'n'), DType::kU8, {1}, data)}, {});
    EXPECT_EQ(header.size() % 8, 0u) << length;
    const size_t json_end = header.find_last_not_of(' ') + 1;
    EXPECT_LT(header.size() - json_end, 8u);
    EXPECT_EQ(header[json_end - 1], '}');
  }
}

TEST(HeaderWriter, OrdersByAlignmentThenNameLikeTheCrate) {
  const auto b8 = zeros(8);
  const auto b4 = zeros(4);
  const auto b2 = zeros(2);
  const auto b1 = zeros(1);
  const std::vector<TensorToWrite> tensors = {
      tensor("z_bool", DType::kBool, {1}, b1), tensor("f4", DType::kF4, {2}, b1),
      tensor("b_f32", DType::kF32, {1}, b4),   tensor("a_f32", DType::kF32, {1}, b4),
      tensor("bf16", DType::kBF16, {1}, b2),   tensor("u64", DType::kU64, {1}, b8),
      tensor("i64", DType::kI64, {1}, b8),     tensor("f64", DType::kF64, {1}, b8),
      tensor("c64", DType::kC64, {1}, b8),     tensor("f16", DType::kF16, {1}, b2),
      tensor("u8", DType::kU8, {1}, b1),       tensor("fnuz", DType::kF8E4M3FNUZ, {1}, b1),
  };
  const SafetensorsHeader header = parse_written(serialize_safetensors_header(tensors, {}), 48);
  std::vector<std::string> order;
  for (const TensorInfo& info : header.tensors) order.push_back(info.name);
  const std::vector<std::string> expected = {"u64",  "i64", "f64",  "c64", "a_f32", "b_f32",
                                             "bf16", "f16", "fnuz", "u8",  "f4",    "z_bool"};
  EXPECT_EQ(order, expected);
  // Most aligned first means every tensor starts at a multiple of its element size.
  for (const TensorInfo& info : header.tensors) {
    const uint64_t element_bytes = (dtype_bits(info.dtype) + 7) / 8;
    EXPECT_EQ((header.data_start + info.begin) % element_bytes, 0u) << info.name;
  }
}

TEST(HeaderWriter, EscapesStringsLikeSerdeJson) {
  const auto data = zeros(1);
  const std::string name = std::string("q\"b\\s/\x01\x1f\x7f\b\f\n\r\t\xc3\xa9", 16);
  const std::string header =
      serialize_safetensors_header({tensor(name, DType::kU8, {1}, data)}, {});
  const std::string expected =
      std::string(R"({"q\"b\\s/\u0001\u001f)") + "\x7f" + R"(\b\f\n\r\t)" + "\xc3\xa9\":";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(parse_written(header, 1).tensors.at(0).name, name);
}

TEST(HeaderWriter, MetadataComesFirstAndRoundTrips) {
  const auto data = zeros(2);
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "line\n\"quoted\""}};
  const std::string header =
      serialize_safetensors_header({tensor("w", DType::kF16, {1}, data)}, metadata);
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"format":"pt","note":"line\n\"quoted\""},"w":)", 0),
            0u)
      << header;
  EXPECT_EQ(parse_written(header, 2).metadata, metadata);
}

Error write_error(const std::vector<TensorToWrite>& tensors,
                  const std::map<std::string, std::string>& meta = {}) {
  try {
    serialize_safetensors_header(tensors, meta);
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "serialised without error";
  return Error(ErrorKind::kIo, "none");
}

TEST(HeaderWriter, RejectsBadArguments) {
  const auto b4 = zeros(4);
  const auto b3 = zeros(3);
  const auto b1 = zeros(1);
  Error error = write_error({tensor("w", DType::kF32, {1}, b4), tensor("w", DType::kF32, {1}, b4)});
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error.tensor(), "w");
  error = write_error({tensor("w", DType::kF32, {1}, b3)});
  EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error.expected(), "4 bytes");
  EXPECT_EQ(error.found(), "3 bytes");
  EXPECT_EQ(write_error({tensor("__metadata__", DType::kU8, {1}, b1)}).kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(write_error({tensor("odd", DType::kF4, {3}, b1)}).tensor(), "odd");
  EXPECT_EQ(write_error({tensor("big", DType::kF32, {1ULL << 62, 8}, b1)}).kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(write_error({tensor("bad\xff", DType::kU8, {1}, b1)}).field(), "name");
  EXPECT_EQ(write_error({}, {{"k", "\xc0\xaf"}}).field(), "__metadata__");
}

}  // namespace
}  // namespace shardload
