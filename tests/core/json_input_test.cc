// The bounded JSON reader every entry point uses: depth and size limits that hold before any
// recursion, files that are not regular (a FIFO must not block), and messages that never quote
// the text, which may be someone else's file reached through a link.
#include "core/json_input.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

Error parse_error_of(std::string_view text, const JsonLimits& limits = kRequestJsonLimits) {
  try {
    parse_json(text, ErrorKind::kInvalidArgument, "body", limits);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::kIo, "none");
}

TEST(JsonInput, ParsesWhatIsWithinTheBounds) {
  const nlohmann::json value =
      parse_json(R"({"a": [[1, 2], {"b": "[[["}]})", ErrorKind::kConfig, "x", kConfigJsonLimits);
  EXPECT_EQ(value["a"][1]["b"], "[[[");
  EXPECT_NO_THROW(parse_json(nested_arrays(64), ErrorKind::kConfig, "x", kConfigJsonLimits));
}

TEST(JsonInput, RefusesNestingDeeperThanTheLimitWithoutRecursing) {
  // 120 KB of nested arrays crashed the server and the CLI: the depth is refused up front.
  const Error e = parse_error_of(nested_arrays(60000));
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  EXPECT_NE(e.found().find("level 65"), std::string::npos) << e.found();
  EXPECT_EQ(parse_error_of(nested_arrays(65)).message(), "JSON nested too deeply");
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(parse_json("[\"" + std::string(1000, '[') + "\\\"\"]", ErrorKind::kConfig, "x",
                             kConfigJsonLimits));
}

TEST(JsonInput, RefusesTextLargerThanTheLimit) {
  const Error e = parse_error_of("[1, 2, 3]", {.max_bytes = 4});
  EXPECT_EQ(e.message(), "JSON text too large");
  EXPECT_EQ(e.expected(), "at most 4 bytes");
  EXPECT_EQ(e.found(), "9 bytes");
}

TEST(JsonInput, SyntaxErrorsGiveThePositionNotTheText) {
  const Error e = parse_error_of("{\"a\": 1,\n \"hunter2-secret-value");
  const std::string what = e.what();
  EXPECT_EQ(what.find("hunter2"), std::string::npos) << what;
  EXPECT_NE(what.find("line 2"), std::string::npos) << what;
  EXPECT_NE(what.find("invalid JSON"), std::string::npos) << what;
  const Error literal = parse_error_of("root:$6$saltsalt$hashhashhash:19000:0:99999:7:::");
  EXPECT_EQ(std::string(literal.what()).find("root"), std::string::npos) << literal.what();
  EXPECT_EQ(std::string(literal.what()).find("'r'"), std::string::npos) << literal.what();
}

TEST(JsonInput, ReadsOnlyRegularFilesWithinTheLimit) {
  TempDir dir;
  write_file(dir.file("a.json"), R"({"k": 1})");
  EXPECT_EQ(read_json_file(dir.file("a.json"), ErrorKind::kConfig, kConfigJsonLimits)["k"], 1);
  try {
    read_json_file(dir.file("a.json"), ErrorKind::kConfig, {.max_bytes = 3});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.message(), "file too large");
    EXPECT_EQ(e.found(), "8 bytes");
    EXPECT_EQ(e.file(), dir.file("a.json"));
  }
  // A FIFO would block a plain open or read until someone writes to it.
  ASSERT_EQ(::mkfifo(dir.file("fifo.json").c_str(), 0600), 0);
  try {
    read_json_file(dir.file("fifo.json"), ErrorKind::kConfig, kConfigJsonLimits);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "cannot read file: not a regular file");
  }
  try {
    read_json_file(dir.path().string(), ErrorKind::kIo, kConfigJsonLimits, "expert map");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "cannot read expert map: is a directory");
  }
}

TEST(JsonInput, BriefCutsLongValues) {
  EXPECT_EQ(brief_json(nlohmann::json{1, 2}), "[1,2]");
  EXPECT_EQ(brief_json(nlohmann::json(std::string(100, 'a')), 5), "\"aaaa...");
  // "é" is two bytes: a cut between them would leave text no JSON writer accepts.
  EXPECT_EQ(brief_json(nlohmann::json("aé"), 3), "\"a...");
}

}  // namespace
}  // namespace shardload
