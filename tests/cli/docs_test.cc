// The README is read in five minutes: at most 250 lines and no dated measurement (those are
// docs/benchmarks.md's) and links every page; every page of docs/ opens with what it covers and for
// whom in at most five lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::read_file;

constexpr size_t kReadmeLines = 250;
constexpr size_t kOpeningLines = 5;

TEST(Docs, TheReadmeIsShortAndHoldsNoDatedMeasurement) {
  const std::string readme = read_file(testing::source_dir() + "/README.md");
  std::istringstream lines(readme);
  size_t count = 0;
  for (std::string line; std::getline(lines, line);) {
    ++count;
    EXPECT_FALSE(std::regex_search(line, std::regex(R"(\b20\d\d-\d\d-\d\d\b)")))
        << "README.md:" << count
        << " holds a date; dated measurements go to docs/benchmarks.md: " << line;
  }
  EXPECT_LE(count, kReadmeLines);
}

TEST(Docs, EveryPageOpensWithWhatItCoversInAtMostFiveLines) {
  size_t pages = 0;
  for (const fs::directory_entry& entry :
       fs::recursive_directory_iterator(testing::source_dir() + "/docs")) {
    if (entry.path().extension() != ".md") continue;
    ++pages;
    std::istringstream text(read_file(entry.path().string()));
    std::string title, blank, line;
    std::getline(text, title);
    std::getline(text, blank);
    EXPECT_TRUE(title.starts_with("# ") && blank.empty())
        << entry.path() << ": a title, then a blank line";
    size_t opening = 0;
    while (std::getline(text, line) && !line.empty()) ++opening;
    EXPECT_GE(opening, 1u) << entry.path();
    EXPECT_LE(opening, kOpeningLines) << entry.path() << ": the opening paragraph";
  }
  EXPECT_GT(pages, 0u);
}

// "Where to read more" names every page (docs/families/ as one folder).
TEST(Docs, TheReadmeLinksEveryPage) {
  const std::string readme = read_file(testing::source_dir() + "/README.md");
  for (const fs::directory_entry& entry : fs::directory_iterator(testing::source_dir() + "/docs")) {
    const std::string name = entry.path().filename().string() + (entry.is_directory() ? "/" : "");
    EXPECT_NE(readme.find("](docs/" + name + ")"), std::string::npos)
        << "README.md does not link docs/" << name;
  }
}

}  // namespace
}  // namespace shardload
