#include "shardload/error.h"

#include <gtest/gtest.h>

namespace shardload {
namespace {

TEST(ErrorTest, MessageNamesFileTensorFieldAndExpectedVersusFound) {
  const Error error(ErrorKind::kSizeMismatch, "length disagrees with shape",
                    {.file = "m.safetensors", .tensor = "w", .field = "data_offsets",
                     .expected = "8 bytes", .found = "12 bytes"});
  EXPECT_EQ(error.kind(), ErrorKind::kSizeMismatch);
  EXPECT_STREQ(error.what(),
               "m.safetensors: tensor 'w': data_offsets: length disagrees with shape "
               "(expected 8 bytes, found 12 bytes)");
  EXPECT_EQ(error.tensor(), "w");
  EXPECT_EQ(error_kind_name(error.kind()), "size_mismatch");
}

// Only the half that is known: "(expected -, found -1)" read as if "-" were what was expected.
TEST(ErrorTest, MessageSaysOnlyTheHalfThatIsKnown) {
  EXPECT_STREQ(Error(ErrorKind::kInvalidArgument, "bad", {.found = "-1"}).what(), "bad (found -1)");
  EXPECT_STREQ(Error(ErrorKind::kInvalidArgument, "bad", {.expected = "0 or 1"}).what(), "bad (expected 0 or 1)");
  EXPECT_STREQ(Error(ErrorKind::kInvalidArgument, "bad", {}).what(), "bad");
}

TEST(ErrorTest, MessageIsAlwaysOneLine) {
  const Error error(ErrorKind::kHeaderJson, "bad\nline", {.found = "a\r\nb"});
  EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos);
}

TEST(ErrorTest, WithFileAddsContextOnlyWhenMissing) {
  const Error bare(ErrorKind::kIo, "short read", {.tensor = "t"});
  EXPECT_EQ(bare.with_file("a").file(), "a");
  EXPECT_EQ(bare.with_file("a").with_file("b").file(), "a");
  EXPECT_EQ(bare.with_file("a").tensor(), "t");
}

}  // namespace
}  // namespace shardload
