// Header validation up to the entries: length prefix, UTF-8, JSON, structure, dtypes, shapes,
// metadata. Offsets, sizes and the valid edge cases are in header_offsets_test.cc.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "safetensors_bytes.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"

namespace shardload {
namespace {

using testing::safetensors_file;

constexpr std::string_view kModelFile = "model-00001.safetensors";

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors_header(bytes_of(bytes), bytes.size(), kModelFile);
}

::testing::AssertionResult fails_with(const std::string& bytes, ErrorKind kind,
                                      std::string_view tensor = "", std::string_view field = "") {
  try {
    parse(bytes);
  } catch (const Error& error) {
    if (error.kind() != kind || error.tensor() != tensor ||
        (!field.empty() && error.field() != field) || error.file() != kModelFile) {
      return ::testing::AssertionFailure()
             << "expected " << error_kind_name(kind) << " on tensor '" << tensor << "' field '"
             << field << "', got " << error_kind_name(error.kind()) << ": " << error.what();
    }
    return ::testing::AssertionSuccess() << error.what();
  }
  return ::testing::AssertionFailure() << "parsed without error";
}

// One valid F32 scalar entry whose fields can be replaced.
std::string scalar_entry(std::string_view dtype = "\"F32\"", std::string_view shape = "[]",
                         std::string_view offsets = "[0,4]") {
  return fmt::format(R"({{"dtype":{},"shape":{},"data_offsets":{}}})", dtype, shape, offsets);
}

TEST(HeaderPrefix, FileShorterThanTheLengthIsTooSmall) {
  for (size_t size = 0; size < 8; ++size) {
    EXPECT_TRUE(
        fails_with(std::string(size, '\0'), ErrorKind::kHeaderTooSmall, "", "header_length"));
  }
}

TEST(HeaderPrefix, LengthAboveTheCapIsTooLarge) {
  std::string bytes = safetensors_file("{}");
  bytes[0] = static_cast<char>(0x01);
  bytes[1] = static_cast<char>(0xE1);
  bytes[2] = static_cast<char>(0xF5);
  bytes[3] = static_cast<char>(0x05);  // 0x05F5E101 = 100,000,001
  EXPECT_TRUE(fails_with(bytes, ErrorKind::kHeaderTooLarge, "", "header_length"));
  std::string huge(8, static_cast<char>(0xFF));  // 2^64 - 1 must not wrap around when 8 is added
  EXPECT_TRUE(fails_with(huge + "{}", ErrorKind::kHeaderTooLarge));
}

TEST(HeaderPrefix, LengthAtTheCapIsAllowed) {
  // 100,000,000 bytes declared in a file that big: past the cap check, stopped only because the
  // caller gave just the 8-byte prefix.
  const std::string bytes("\x00\xE1\xF5\x05\x00\x00\x00\x00", 8);
  try {
    parse_safetensors_header(bytes_of(bytes), 100'000'008, kModelFile);
    FAIL() << "parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kHeaderLength) << error.what();
  }
}

TEST(HeaderPrefix, LengthPastTheEndOfFile) {
  std::string bytes = safetensors_file("{}");
  bytes[0] = 3;  // one more than the file holds
  EXPECT_TRUE(fails_with(bytes, ErrorKind::kHeaderLength, "", "header_length"));
  std::string just_length = safetensors_file("");
  just_length[0] = '<';  // the crate's own example: a length and nothing after it
  EXPECT_TRUE(fails_with(just_length, ErrorKind::kHeaderLength));
}

TEST(HeaderPrefix, PrefixShorterThanTheHeaderIsReported) {
  const std::string bytes = safetensors_file("{}      ");
  try {
    parse_safetensors_header(bytes_of(bytes).first(12), bytes.size(), kModelFile);
    FAIL() << "parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kHeaderLength);
  }
}

TEST(HeaderUtf8, MalformedSequencesAreRejectedWithTheirOffset) {
  const std::string_view bad[] = {
      "\xFF",              // never valid
      "\xC0\xAF",          // overlong '/'
      "\xE0\x80\xAF",      // overlong, three bytes
      "\xED\xA0\x80",      // UTF-16 surrogate
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xE2\x82",          // truncated
      "\x80",              // lone continuation byte
  };
  for (size_t i = 0; i < std::size(bad); ++i) {
    const std::string json = fmt::format(R"({{"a{}":{}}})", bad[i], scalar_entry());
    try {
      parse(safetensors_file(json, 4));
      ADD_FAILURE() << "accepted sequence #" << i;
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kHeaderUtf8) << error.what();
      EXPECT_EQ(error.field(), "header");
      EXPECT_NE(error.found().find("file offset 11"), std::string::npos) << error.what();
    }
  }
}

TEST(HeaderUtf8, NonAsciiNamesAreValid) {
  const std::string json = fmt::format(R"({{"é.中.😀":{}}})", scalar_entry());
  const SafetensorsHeader header = parse(safetensors_file(json, 4));
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.tensors[0].name, "é.中.😀");
}

TEST(HeaderJson, SyntaxErrorsAreJsonErrors) {
  const std::string_view bad[] = {
      "",                             // nothing at all
      "{",                            // truncated (the crate's example)
      R"({"a":})",                    // missing value
      "{} x",                         // trailing garbage
      std::string_view("{}\0\0", 4),  // NUL padding: only whitespace may pad
      "/**/{}",                       // comments are not JSON
      "{'a':1}",                      // single quotes
      R"({"\ud800":1})",              // lone surrogate escape
      R"({"a":01})",                  // leading zero
      "{}{}",                         // two values
      "\xEF\xBB\xBF{}",               // byte-order mark, which nlohmann alone would skip
      R"({"w":{"x":1e400}})",         // number out of range, even where it would be ignored
  };
  for (std::string_view json : bad) {
    EXPECT_TRUE(fails_with(safetensors_file(json), ErrorKind::kHeaderJson, "", "header")) << json;
  }
}

TEST(HeaderJson, SyntaxErrorWinsOverAnEarlierBadEntry) {
  // The crate reads the whole text before looking at entries, so a broken text is a JSON error.
  EXPECT_TRUE(fails_with(safetensors_file(R"({"a":5,"b":)"), ErrorKind::kHeaderJson));
}

TEST(HeaderJson, NestingIsLimitedLikeSerdeJson) {
  const auto nested = [](size_t depth) {
    return fmt::format(R"({{"a":{{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":{}{}}}}})",
                       std::string(depth, '['), std::string(depth, ']'));
  };
  EXPECT_NO_THROW(parse(safetensors_file(nested(100), 4)));  // 102 levels deep in all
  EXPECT_TRUE(fails_with(safetensors_file(nested(200), 4), ErrorKind::kHeaderJson));
}

TEST(HeaderStructure, TopLevelMustBeAnObject) {
  for (std::string_view json : {"[]", "\"x\"", "5", "null", "[{}]"}) {
    EXPECT_TRUE(fails_with(safetensors_file(json), ErrorKind::kHeaderStructure, "", "header"))
        << json;
  }
}

// The crate's serde would also take an entry written as an array of the three fields; nobody writes
// that, and the format describes objects, so it is refused.
TEST(HeaderStructure, EntriesMustBeObjects) {
  for (std::string_view value : {"5", "\"F32\"", "null", "[\"F32\",[],[0,4]]"}) {
    EXPECT_TRUE(fails_with(safetensors_file(fmt::format(R"({{"w":{}}})", value)),
                           ErrorKind::kHeaderStructure, "w"))
        << value;
  }
}

TEST(HeaderStructure, MissingFieldsAreNamed) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {R"({"shape":[],"data_offsets":[0,4]})", "dtype"},
      {R"({"dtype":"F32","data_offsets":[0,4]})", "shape"},
      {R"({"dtype":"F32","shape":[]})", "data_offsets"},
  };
  for (const auto& [value, field] : cases) {
    EXPECT_TRUE(fails_with(safetensors_file(fmt::format(R"({{"w":{}}})", value), 4),
                           ErrorKind::kHeaderStructure, "w", field));
  }
}

TEST(HeaderStructure, FieldGivenTwiceIsRejected) {
  const std::string json = R"({"w":{"dtype":"F32","shape":[],"dtype":"F32","data_offsets":[0,4]}})";
  EXPECT_TRUE(fails_with(safetensors_file(json, 4), ErrorKind::kHeaderStructure, "w", "dtype"));
}

TEST(HeaderStructure, UnknownFieldsAreIgnoredAsByTheCrate) {
  const std::string json = R"({"w":{"note":{"a":[1,{"b":null}]},"dtype":"F32","shape":[],)"
                           R"("data_offsets":[0,4],"z":-1.5}})";
  const SafetensorsHeader header = parse(safetensors_file(json, 4));
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.tensors[0].dtype, DType::kF32);
}

TEST(HeaderStructure, DtypeMustBeAString) {
  EXPECT_TRUE(fails_with(safetensors_file(fmt::format(R"({{"w":{}}})", scalar_entry("7")), 4),
                         ErrorKind::kHeaderStructure, "w", "dtype"));
}

TEST(HeaderNames, DuplicateTensorIsRejected) {
  const std::string json =
      fmt::format(R"({{"w":{},"v":{},"w":{}}})", scalar_entry(),
                  scalar_entry("\"F32\"", "[]", "[4,8]"), scalar_entry("\"F32\"", "[]", "[8,12]"));
  EXPECT_TRUE(fails_with(safetensors_file(json, 12), ErrorKind::kDuplicateTensor, "w"));
}

TEST(HeaderDtype, UnknownDtypeIsRejected) {
  for (std::string_view dtype : {"\"F128\"", "\"f32\"", "\"\"", "\"F32 \""}) {
    EXPECT_TRUE(fails_with(safetensors_file(fmt::format(R"({{"w":{}}})", scalar_entry(dtype)), 4),
                           ErrorKind::kUnknownDtype, "w", "dtype"))
        << dtype;
  }
}

TEST(HeaderDtype, EveryCrateDtypeIsKnown) {
  for (DType dtype : kAllDTypes) {
    // Eight elements fill whole bytes for every width.
    const uint64_t bytes = 8 * dtype_bits(dtype) / 8;
    const std::string json = fmt::format(
        R"({{"w":{{"dtype":"{}","shape":[8],"data_offsets":[0,{}]}}}})", dtype_name(dtype), bytes);
    const SafetensorsHeader header = parse(safetensors_file(json, bytes));
    EXPECT_EQ(header.tensors.at(0).dtype, dtype) << dtype_name(dtype);
  }
  for (std::string_view name :
       {"F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F6_E2M3", "F4", "C64", "U64"}) {
    EXPECT_TRUE(parse_dtype(name).has_value()) << name;
  }
}

TEST(HeaderShape, DimensionsMustBeNonNegativeIntegers) {
  for (std::string_view shape :
       {"[-1]", "[-0]", "[1.5]", "[1e2]", "[4.0]", "[\"4\"]", "[null]", "[[4]]", "[{}]", "[true]",
        "[18446744073709551616]", "4", "{}", "null", "\"[4]\""}) {
    EXPECT_TRUE(fails_with(
        safetensors_file(fmt::format(R"({{"w":{}}})", scalar_entry("\"F32\"", shape)), 4),
        ErrorKind::kInvalidShape, "w", "shape"))
        << shape;
  }
}

TEST(HeaderShape, LargestDimensionParses) {
  // 2^64 - 1 is a valid dimension; with a zero beside it the tensor is empty, so [0,4] is the wrong
  // length.
  const std::string json =
      fmt::format(R"({{"w":{}}})", scalar_entry("\"U8\"", "[18446744073709551615,0]"));
  EXPECT_TRUE(fails_with(safetensors_file(json, 4), ErrorKind::kSizeMismatch, "w", "data_offsets"));
}

TEST(HeaderShape, OverflowingProductsAreRejected) {
  for (std::string_view shape :
       {"[2,18446744073709551614]",  // the crate's examples
        "[2,9223372036854775807]",
        "[2305843009213693952]",          // 2^61 elements x 32 bits
        "[18446744073709551615,2,0]"}) {  // a zero after the overflow does not help
    EXPECT_TRUE(
        fails_with(safetensors_file(
                       fmt::format(R"({{"w":{}}})", scalar_entry("\"I32\"", shape, "[0,16]")), 16),
                   ErrorKind::kShapeOverflow, "w", "shape"))
        << shape;
  }
}

TEST(HeaderMetadata, MustBeAnObject) {
  for (std::string_view value : {"5", "\"x\"", "[]", "[[\"a\",\"b\"]]", "true"}) {
    EXPECT_TRUE(fails_with(safetensors_file(fmt::format(R"({{"__metadata__":{}}})", value)),
                           ErrorKind::kInvalidMetadata, "", "__metadata__"))
        << value;
  }
}

TEST(HeaderMetadata, ValuesMustBeStrings) {
  for (std::string_view value : {"1", "null", "{}", "[]", "false", "1.5"}) {
    EXPECT_TRUE(fails_with(
        safetensors_file(fmt::format(R"({{"__metadata__":{{"a":"b","format":{}}}}})", value)),
        ErrorKind::kInvalidMetadata, "", "__metadata__"))
        << value;
  }
}

TEST(HeaderMetadata, DuplicateKeysAreRejected) {
  EXPECT_TRUE(fails_with(safetensors_file(R"({"__metadata__":{"format":"pt","format":"np"}})"),
                         ErrorKind::kInvalidMetadata, "", "__metadata__"));
  EXPECT_TRUE(fails_with(safetensors_file(R"({"__metadata__":{},"__metadata__":{}})"),
                         ErrorKind::kInvalidMetadata, "", "__metadata__"));
}

TEST(HeaderMetadata, NullMeansNoMetadata) {
  const SafetensorsHeader header = parse(safetensors_file(R"({"__metadata__":null})"));
  EXPECT_TRUE(header.metadata.empty());
  EXPECT_TRUE(header.tensors.empty());
}

TEST(HeaderMetadata, StringsAreUnescaped) {
  const SafetensorsHeader header =
      parse(safetensors_file(R"({"__metadata__":{"format":"pt","q\"k":"a\nb\u00e9","":""}})"));
  const std::map<std::string, std::string> expected = {
      {"format", "pt"}, {"q\"k", "a\nbé"}, {"", ""}};
  EXPECT_EQ(header.metadata, expected);
}

TEST(HeaderErrors, MessageIsOneLineNamingFileTensorAndField) {
  try {
    parse(safetensors_file(fmt::format(R"({{"layer.0":{}}})", scalar_entry("\"F99\"")), 4));
    FAIL() << "parsed";
  } catch (const Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find(kModelFile), std::string::npos) << what;
    EXPECT_NE(what.find("layer.0"), std::string::npos) << what;
    EXPECT_NE(what.find("dtype"), std::string::npos) << what;
    EXPECT_NE(what.find("F99"), std::string::npos) << what;
  }
}

TEST(HeaderErrors, LongValuesAreCutInMessages) {
  const std::string dtype = "\"" + std::string(100'000, 'X') + "\"";
  try {
    parse(safetensors_file(fmt::format(R"({{"w":{}}})", scalar_entry(dtype)), 4));
    FAIL() << "parsed";
  } catch (const Error& error) {
    EXPECT_LT(std::string_view(error.what()).size(), 400u);
  }
  try {
    parse(safetensors_file(
        "{\"" + std::string(100'000, 'k')));  // the parser quotes the token it stopped at
    FAIL() << "parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kHeaderJson);
    EXPECT_LT(std::string_view(error.what()).size(), 600u);
  }
}

}  // namespace
}  // namespace shardload
