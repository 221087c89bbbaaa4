// The simdjson fast path of the header parser must give exactly what the event parser gives, or
// decline: checked on real generated checkpoints, and on texts each built to be declined, where the
// combined parser must then fail (or succeed) exactly as the event parser does.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/header_json.h"
#include "format/length_prefix.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using format::parse_header_json;
using format::parse_header_json_events;
using format::parse_header_json_fast;

constexpr std::string_view kFile = "model.safetensors";

// Equal headers, or the first part that differs.
::testing::AssertionResult same_header(const SafetensorsHeader& a, const SafetensorsHeader& b) {
  if (a == b) return ::testing::AssertionSuccess();
  if (a.tensors.size() != b.tensors.size()) {
    return ::testing::AssertionFailure()
           << a.tensors.size() << " tensors against " << b.tensors.size();
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i] != b.tensors[i]) {
      return ::testing::AssertionFailure()
             << "tensor " << i << ": " << a.tensors[i].name << " / " << b.tensors[i].name;
    }
  }
  if (a.metadata != b.metadata) return ::testing::AssertionFailure() << "metadata";
  return ::testing::AssertionFailure() << "name index or header offsets";
}

// What a parser made of a text: its header, or the message of its error.
struct Outcome {
  std::optional<SafetensorsHeader> header;
  std::string error;
};

template <typename Parse>
Outcome outcome_of(Parse parse) {
  Outcome outcome;
  try {
    outcome.header = parse();
  } catch (const Error& error) {
    outcome.error = error.what();
  }
  return outcome;
}

// parse_header_json (fast path first) and the event parser alone agree on `json`.
::testing::AssertionResult agrees_with_events(std::string_view json) {
  const Outcome combined = outcome_of([&] { return parse_header_json(json, kFile); });
  const Outcome events = outcome_of([&] { return parse_header_json_events(json, kFile); });
  if (combined.header.has_value() != events.header.has_value()) {
    return ::testing::AssertionFailure()
           << "combined: " << (combined.header ? "parsed" : combined.error)
           << "; events: " << (events.header ? "parsed" : events.error);
  }
  if (!combined.header) {
    if (combined.error != events.error) {
      return ::testing::AssertionFailure() << combined.error << " vs " << events.error;
    }
    return ::testing::AssertionSuccess() << combined.error;
  }
  return same_header(*combined.header, *events.header);
}

std::string entry(std::string_view dtype = "\"F32\"", std::string_view shape = "[2]",
                  std::string_view offsets = "[0,8]") {
  return fmt::format(R"({{"dtype":{},"shape":{},"data_offsets":{}}})", dtype, shape, offsets);
}

std::string header_text(const std::string& path) {
  const std::string bytes = testing::read_file(path);
  const uint64_t n = format::load_length(reinterpret_cast<const std::byte*>(bytes.data()));
  return bytes.substr(format::kLengthBytes, n);
}

TEST(HeaderFast, GeneratedCheckpointsParseFastAndAsTheEventsDo) {
  for (const char* quant : {"none", "fp8", "fp8-block"}) {
    testing::TempDir dir;
    TinyOptions options;
    options.arch = quant == std::string_view("fp8-block") ? "deepseek_v3" : "qwen3_moe";
    options.out = dir.path().string();
    options.seed = 7;
    options.quant = quant;
    make_tiny(options);
    size_t files = 0;
    for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
      if (file.path().extension() != ".safetensors") continue;
      const std::string json = header_text(file.path().string());
      const std::optional<SafetensorsHeader> fast = parse_header_json_fast(json);
      ASSERT_TRUE(fast.has_value()) << file.path();
      EXPECT_FALSE(fast->tensors.empty());
      EXPECT_FALSE(fast->metadata.empty()) << "make-tiny writes __metadata__";
      EXPECT_TRUE(same_header(*fast, parse_header_json_events(json, kFile))) << file.path();
      ++files;
    }
    EXPECT_GT(files, 1u) << quant;
  }
}

TEST(HeaderFast, ValidTextsItTakes) {
  const std::vector<std::string> texts = {
      "{}",
      " { } ",
      fmt::format(R"({{"a":{}}})", entry()),
      fmt::format(R"({{"__metadata__":null,"a":{}}})", entry()),
      fmt::format(R"({{"a":{},"__metadata__":{{"format":"pt","x":""}}}})", entry()),
      // Fields the crate ignores, when scalars; any order of fields; offsets out of order.
      R"({"b":{"data_offsets":[8,16],"x":1,"shape":[2],"y":null,"dtype":"F32","z":"s"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"w":1.5,"v":true}})",
      fmt::format(R"({{"a":{}}})", entry("\"BF16\"", "[0,3]", "[0,0]")),
      fmt::format(R"({{"a":{}}})",
                  entry("\"U8\"", "[18446744073709551615]", "[9223372036854775808,1]")),
      "{\"caf\xC3\xA9.weight\":" + entry() + "}",
  };
  for (const std::string& json : texts) {
    EXPECT_TRUE(parse_header_json_fast(json).has_value()) << json;
    EXPECT_TRUE(agrees_with_events(json)) << json;
  }
}

TEST(HeaderFast, DeclinesWhatTheEventParserMustJudge) {
  const std::vector<std::string> texts = {
      // Texts the parsers could read differently.
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[-0]", "[0,0]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[2]", "[-0,8]")),
      fmt::format(R"({{"x-0":{}}})", entry()),
      fmt::format(R"({{"\u0061":{}}})", entry()),
      fmt::format(R"({{"\ud800":{}}})", entry()),
      fmt::format(R"({{"a\u0000b":{}}})", entry()),
      fmt::format(R"({{"a":{}}})", entry("\"F\\u0033\\u0032\"")),
      // Invalid JSON.
      "",
      "{",
      "{} {}",
      "\xEF\xBB\xBF{}",
      std::string("{}\0x", 4),
      "[1]",
      "null",
      R"({"a":1e400})",
      // Valid JSON, invalid header.
      fmt::format(R"({{"a":{},"a":{}}})", entry(), entry()),
      fmt::format(R"({{"__metadata__":{{}},"__metadata__":{{}},"a":{}}})", entry()),
      fmt::format(R"({{"__metadata__":{{"k":"1","k":"2"}},"a":{}}})", entry()),
      fmt::format(R"({{"__metadata__":{{"k":1}},"a":{}}})", entry()),
      fmt::format(R"({{"__metadata__":[],"a":{}}})", entry()),
      R"({"a":{"dtype":"F32","shape":[2]}})",
      R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      fmt::format(R"({{"a":{}}})", entry("\"F33\"")),
      fmt::format(R"({{"a":{}}})", entry("7")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[2.0]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[-2]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[18446744073709551616]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "2")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[2]", "[0,8,9]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[2]", "[0]")),
      fmt::format(R"({{"a":{}}})", entry("\"F32\"", "[2]", "{}")),
      R"({"a":[]})",
      R"({"a":"F32"})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[1,{"b":[]}]}})",
      std::string(200, '[') + std::string(200, ']'),
  };
  for (const std::string& json : texts) {
    EXPECT_FALSE(parse_header_json_fast(json).has_value()) << json;
    EXPECT_TRUE(agrees_with_events(json)) << json;
  }
}

}  // namespace
}  // namespace shardload
