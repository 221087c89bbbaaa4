// Runs the real shardload binary on generated files and checks what a user sees: exit codes, one-line
// errors on stderr for every kind of bad input, and the inspect output.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "safetensors_bytes.h"
#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// A safetensors file from a header text and a data section, with the 8-byte little-endian length prefix.
std::string raw_file(const std::string& header, const std::string& data) {
  return testing::safetensors_bytes(header, data);
}

void expect_one_line_error(const CommandResult& result, const std::string& what) {
  EXPECT_NE(result.exit_code, 0) << what;
  EXPECT_LT(result.exit_code, 128) << what << ": killed by a signal";
  ASSERT_FALSE(result.err.empty()) << what;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << what << ": " << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << what << ": " << result.err;
}

TEST(CliTest, InspectListsTensorsAndTotals) {
  TempDir dir;
  write_file(dir.file("a.safetensors"),
             raw_file(R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      std::string(12, '\1')));
  const CommandResult result = run_shardload({"inspect", dir.file("a.safetensors")});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("[2, 2]"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("total: 2 tensors, 12 bytes"), std::string::npos) << result.out;

  const CommandResult json = run_shardload({"inspect", dir.file("a.safetensors"), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["total_tensors"], 2);
  EXPECT_EQ(parsed["total_bytes"], 12);
  EXPECT_EQ(parsed["tensors"][0]["name"], "a");
  EXPECT_EQ(parsed["tensors"][1]["dtype"], "BF16");
}

TEST(CliTest, InspectAcceptsTheCratesValidEdgeCases) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zero-size dims", raw_file(R"({"z":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", "")},
      {"scalar", raw_file(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})",
                          std::string(8, '\0'))},
      {"metadata only", raw_file(R"({"__metadata__":{"format":"pt"}})", "")},
      {"empty header", raw_file("{}", "")},
      {"padded header", raw_file(R"({"__metadata__":{"k":"v"}}       )", "")},
  };
  for (const auto& [what, bytes] : cases) {
    write_file(dir.file("edge.safetensors"), bytes);
    const CommandResult result = run_shardload({"inspect", dir.file("edge.safetensors")});
    EXPECT_EQ(result.exit_code, 0) << what << ": " << result.err;
  }
}

TEST(CliTest, InspectRejectsEveryKindOfMalformedFileWithOneLine) {
  TempDir dir;
  const std::string f32 = R"("dtype":"F32","shape":[2])";
  std::string too_large(8, '\0');
  too_large[3] = 0x7f;  // declares a header of about 2 GB
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty file", ""},
      {"shorter than the length prefix", "abc"},
      {"header larger than the cap", too_large + "{}"},
      {"header past the end of the file", raw_file("{}", "").substr(0, 9)},
      {"invalid UTF-8", raw_file("{\"\xff\xfe\":{}}", "")},
      {"not JSON", raw_file("{\"a\":", "")},
      {"not an object", raw_file("[1,2]", "")},
      {"entry not an object", raw_file(R"({"a":3})", "")},
      {"duplicate tensor", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,8]},"a":{)" + f32 +
                                        R"(,"data_offsets":[8,16]}})",
                                    std::string(16, '\0'))},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})",
                                 std::string(8, '\0'))},
      {"negative dim", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                                std::string(8, '\0'))},
      {"shape overflow",
       raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                std::string(8, '\0'))},
      {"offsets not from 0",
       raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[4,12]}})", std::string(12, '\0'))},
      {"hole between tensors", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,8]},"b":{)" + f32 +
                                            R"(,"data_offsets":[12,20]}})",
                                        std::string(20, '\0'))},
      {"overlap", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,8]},"b":{)" + f32 +
                               R"(,"data_offsets":[4,12]}})",
                           std::string(12, '\0'))},
      {"size mismatch", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,12]}})",
                                 std::string(12, '\0'))},
      {"trailing bytes", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,8]}})",
                                  std::string(9, '\0'))},
      {"truncated data", raw_file("{\"a\":{" + f32 + R"(,"data_offsets":[0,8]}})",
                                  std::string(7, '\0'))},
      {"metadata not strings", raw_file(R"({"__metadata__":{"k":1}})", "")},
  };
  for (const auto& [what, bytes] : cases) {
    write_file(dir.file("bad.safetensors"), bytes);
    expect_one_line_error(run_shardload({"inspect", dir.file("bad.safetensors")}), what);
  }
}

TEST(CliTest, BadArgumentsGiveOneLineErrors) {
  TempDir dir;
  expect_one_line_error(run_shardload({"inspect", dir.file("missing")}), "missing path");
  expect_one_line_error(run_shardload({"inspect"}), "no path");
  expect_one_line_error(run_shardload({"inspect", dir.path().string(), "--bogus"}), "unknown flag");
  expect_one_line_error(run_shardload({"frobnicate"}), "unknown command");
  expect_one_line_error(run_shardload({"make-tiny", "--arch", "gpt5", "--out", dir.file("m")}),
                        "unknown arch");
  expect_one_line_error(
      run_shardload({"make-tiny", "--arch", "llama", "--out", dir.file("m"), "--layers", "0"}),
      "zero layers");
}

// `load --checksum` prints one line per exported rank tensor, rank by rank and by name within a
// rank, with the hashes an in-process load gives, then its summary. The command ends without
// freeing its weights (std::_Exit): this also checks that none of its output is lost.
// The tiny qwen3_moe model the load tests read, in `dir`.
TinyOptions make_moe_model(const TempDir& dir) {
  TinyOptions options;
  options.arch = "qwen3_moe";
  options.out = dir.file("model");
  options.seed = 3;
  make_tiny(options);
  return options;
}

TEST(CliTest, LoadPrintsEveryRankTensorsChecksumThenASummary) {
  TempDir dir;
  const TinyOptions options = make_moe_model(dir);
  const CommandResult result = run_shardload(
      {"load", options.out, "--tp", "4", "--ep", "2", "--checksum", "--threads", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;

  const Checkpoint ckpt = Checkpoint::open(options.out);
  ParallelConfig parallel;
  parallel.tp = 4;
  parallel.ep = 2;
  const Plan plan = make_plan(ckpt, parallel);
  std::string expected;
  size_t lines = 0;
  for (const RankWeights& weights : load_ranks(ckpt, plan)) {
    std::map<std::string, std::string> rank_lines;  // a rank's tensors come in name order
    for (const PlanParam& param : plan.ranks[static_cast<size_t>(weights.rank)].params) {
      if (!param.exported()) continue;
      const TensorView view = param_view(weights, param);
      rank_lines[param.name] =
          fmt::format("{}\t{}\t{}\t[{}]\t{}\n", weights.rank, param.name, dtype_name(view.dtype),
                      fmt::join(view.shape, ","), xxh3_hex(view.data));
      ++lines;
    }
    for (const auto& [name, line] : rank_lines) expected += line;
  }
  EXPECT_GT(lines, 100u);
  ASSERT_EQ(result.out.substr(0, expected.size()), expected);
  const std::string summary = result.out.substr(expected.size());
  EXPECT_EQ(summary.rfind("loaded 4 ranks of Qwen3MoeForCausalLM (tp=4 ep=2)", 0), 0u) << summary;
  EXPECT_EQ(summary.find('\n'), summary.size() - 1) << summary;
  // The whole load's seconds close the line: bench/run times loads by them.
  const size_t total = summary.rfind("; total ");
  ASSERT_NE(total, std::string::npos) << summary;
  const std::string seconds = summary.substr(total + 8);
  EXPECT_EQ(seconds.find('.'), seconds.size() - 8) << summary;  // "<s>.dddd s\n"
  EXPECT_GT(std::stod(seconds), 0.0) << summary;
}

// --json: the summary's bytes and seconds as one JSON object (what a node prints under mpirun),
// after the checksum lines.
TEST(CliTest, LoadJsonGivesTheSummaryAsJson) {
  TempDir dir;
  const TinyOptions options = make_moe_model(dir);
  const CommandResult result =
      run_shardload({"load", options.out, "--tp", "4", "--ep", "2", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json summary = nlohmann::json::parse(result.out);
  EXPECT_EQ(summary["ranks"], 4);
  EXPECT_EQ(summary["bytes_read"], summary["bytes_needed"]);  // each planned byte read once
  EXPECT_GT(summary["bytes_written"].get<uint64_t>(), 0u);
  EXPECT_GT(summary["seconds"].get<double>(), 0.0);
}

// `shardload serve` runs shardload-serve from its own directory: usage and help come from the
// server's program, and a shardload without it beside says so in one line.
TEST(CliTest, ServeRunsTheServerProgramBesideIt) {
  const CommandResult usage = run_shardload({"serve"});
  expect_one_line_error(usage, "serve without a model");
  EXPECT_EQ(usage.exit_code, 2);
  const CommandResult help = run_shardload({"serve", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("Usage: shardload serve"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--staging-bytes"), std::string::npos) << help.out;

  TempDir dir;
  const std::string alone = dir.file("shardload");
  std::filesystem::copy_file(testing::shardload_bin(), alone);
  const CommandResult missing = run_command({alone, "serve", dir.file("model"), "--name", "x"});
  expect_one_line_error(missing, "no shardload-serve beside shardload");
  EXPECT_NE(missing.err.find(dir.file("shardload-serve")), std::string::npos) << missing.err;
}

TEST(CliTest, MakeTinyWritesEveryFamilyAndInspectValidatesIt) {
  TempDir dir;
  for (const std::string& arch : tiny_architectures()) {
    const std::string out = dir.file(arch);
    const CommandResult made =
        run_shardload({"make-tiny", "--arch", arch, "--out", out, "--seed", "7"});
    ASSERT_EQ(made.exit_code, 0) << arch << ": " << made.err;
    const CommandResult inspected = run_shardload({"inspect", out, "--json"});
    ASSERT_EQ(inspected.exit_code, 0) << arch << ": " << inspected.err;
    EXPECT_TRUE(inspected.err.empty()) << arch << " warned: " << inspected.err;
    const nlohmann::json parsed = nlohmann::json::parse(inspected.out);
    EXPECT_GT(parsed["total_tensors"].get<int>(), 10) << arch;
    EXPECT_GE(parsed["files"].size(), 2u) << arch;
    EXPECT_TRUE(parsed["config"].contains("architectures")) << arch;
  }
}

TEST(CliTest, MakeTinyRefusesANonEmptyDirectoryUnlessOverwrite) {
  TempDir dir;
  const std::string out = dir.file("m");
  ASSERT_EQ(run_shardload({"make-tiny", "--arch", "llama", "--out", out}).exit_code, 0);
  expect_one_line_error(run_shardload({"make-tiny", "--arch", "llama", "--out", out}),
                        "non-empty out");
  EXPECT_EQ(run_shardload({"make-tiny", "--arch", "qwen2", "--out", out, "--overwrite"}).exit_code,
            0);
  const CommandResult inspected = run_shardload({"inspect", out, "--summary"});
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  EXPECT_NE(inspected.out.find("Qwen2ForCausalLM"), std::string::npos) << inspected.out;
}

}  // namespace
}  // namespace shardload
