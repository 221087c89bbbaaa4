// Load statistics from JSON text and files: the accepted shape and a one-line Error for everything
// else.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardload/eplb.h"
#include "shardload/error.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

TEST(EplbLoadJsonTest, ReadsRowsOfNumbers) {
  const auto load =
      parse_expert_load(R"({"expert_load": [[1, 2.5, 0], [3e2, 0.0, 7]], "other": true})");
  EXPECT_EQ(load, (std::vector<std::vector<double>>{{1, 2.5, 0}, {300, 0, 7}}));
}

TEST(EplbLoadJsonTest, EmptyListParsesAndIsRejectedByTheAlgorithm) {
  EXPECT_TRUE(parse_expert_load(R"({"expert_load": []})").empty());
}

TEST(EplbLoadJsonTest, MalformedTextIsAnInvalidArgument) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "invalid JSON"},
      {"{\"expert_load\": [[1, 2]", "invalid JSON"},
      {"[[1, 2]]", "load statistics are not a JSON object"},
      {"{\"load\": [[1, 2]]}", "no expert_load member"},
      {"{\"expert_load\": 5}", "expert_load: not a list of layers"},
      {"{\"expert_load\": [[1, 2], 3]}", "expert_load: layer 1 is not a list"},
      {"{\"expert_load\": [[1, \"2\"]]}", "expert_load: layer 0 expert 1 is not a number"},
      {"{\"expert_load\": [[1, true]]}", "expert_load: layer 0 expert 1 is not a number"},
      {"{\"expert_load\": [[1, null]]}", "expert_load: layer 0 expert 1 is not a number"},
      {"{\"expert_load\": [[[1]]]}", "expert_load: layer 0 expert 0 is not a number"},
  };
  for (const auto& [text, message] : cases) {
    try {
      parse_expert_load(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << text;
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << text << " -> " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(EplbLoadJsonTest, LongValuesAreShortenedInMessages) {
  // A layer that is an object holding a thousand numbers: the message shows only its start.
  std::string text = R"({"expert_load": [{"a": [)";
  for (int i = 0; i < 1000; ++i) text += "1,";
  text += "1]}]}";
  try {
    parse_expert_load(text);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 200u) << what;
    EXPECT_NE(what.find("found {\"a\":[1,1,"), std::string::npos) << what;
    EXPECT_NE(what.find("...)"), std::string::npos) << what;
  }
}

TEST(EplbLoadJsonTest, ReadsAFile) {
  TempDir dir;
  write_file(dir.file("load.json"), std::string_view(R"({"expert_load": [[4, 5]]})"));
  EXPECT_EQ(read_expert_load(dir.file("load.json")), (std::vector<std::vector<double>>{{4, 5}}));
}

TEST(EplbLoadJsonTest, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string missing = dir.file("missing.json");
  try {
    read_expert_load(missing);
    ADD_FAILURE() << "accepted a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(e.file(), missing);
  }
  try {
    read_expert_load(dir.path().string());
    ADD_FAILURE() << "accepted a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  const std::string bad = dir.file("bad.json");
  write_file(bad, std::string_view("{\"expert_load\": [[1, 2],"));
  try {
    read_expert_load(bad);
    ADD_FAILURE() << "accepted truncated JSON";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.file(), bad);
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": invalid JSON", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace shardload
