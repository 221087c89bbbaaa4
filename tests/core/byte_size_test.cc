#include "core/byte_size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "shardload/error.h"

namespace shardload {
namespace {

TEST(ByteSizeTest, ParsesSuffixesInPowersOf1024) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("5G"), uint64_t{5} << 30);
  EXPECT_EQ(parse_byte_size("512m"), uint64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1K"), 1024u);
  for (const char* bad : {"", "0", "G", "5X", "-1", "1.5G", "99999999999999999999", "16777216T"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
}

// The error names the option the text came from (shardload-serve's --staging-bytes was named
// --max-file-size).
TEST(ByteSizeTest, ErrorsNameTheFlagTheyParse) {
  for (const char* flag : {"--staging-bytes", "--max-file-size"}) {
    try {
      parse_byte_size("12Q", flag);
      ADD_FAILURE() << flag << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), flag);
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("12Q"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace shardload
