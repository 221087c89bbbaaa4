// What a user meets at the command line: exit status 2 for usage errors and 1 for bad data, the
// engines' flag spellings, --version, help text, exports refused where a checkpoint is needed, and
// exports written only where they cannot be taken for the checkpoint and loaded only with the
// layout they hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::read_file;
using ::shardload::testing::run_command;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

std::string tiny(const TempDir& dir, const std::string& arch = "qwen3_moe") {
  return ::shardload::testing::make_tiny_model(dir, arch, 2);
}

// One `error: ` line on stderr, nothing on stdout, and the exit status asked for.
void expect_error(const CommandResult& result, int status, const std::string& what) {
  EXPECT_EQ(result.exit_code, status) << what << ": " << result.err;
  EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << what << ": " << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << what << ": " << result.err;
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    out.insert(fs::relative(entry.path(), dir).string());
  }
  return out;
}

TEST(CliUsability, UsageErrorsExitTwoAndDataErrorsOne) {
  TempDir dir;
  const std::string model = tiny(dir);
  const std::string m = dir.file("m");
  const std::vector<std::pair<std::string, std::vector<std::string>>> usage = {
      {"--tp 0", {"load", model, "--tp", "0"}},
      {"--ep 0", {"plan", model, "--ep", "0"}},
      {"--ep not dividing --tp", {"plan", model, "--tp", "4", "--ep", "3"}},
      {"--tp not dividing the heads", {"export", model, "--tp", "3", "--out", dir.file("e")}},
      {"negative --redundant-experts", {"load", model, "--redundant-experts", "-1"}},
      {"--rank past the layout", {"load", model, "--tp", "2", "--rank", "2"}},
      {"bad --max-file-size", {"export", model, "--out", dir.file("e"), "--max-file-size", "5X"}},
      {"zero --max-file-size", {"export", model, "--out", dir.file("e"), "--max-file-size", "0"}},
      {"unknown --arch", {"make-tiny", "--arch", "gpt5", "--out", m}},
      {"unknown --quant", {"make-tiny", "--arch", "llama", "--quant", "int3", "--out", m}},
      {"--experts on a dense family",
       {"make-tiny", "--arch", "llama", "--experts", "4", "--out", m}},
      {"unknown --dtype", {"plan", model, "--dtype", "int8"}},
  };
  for (const auto& [what, args] : usage) expect_error(run_shardload(args), 2, what);
  EXPECT_FALSE(fs::exists(m));
  EXPECT_FALSE(fs::exists(dir.file("e")));

  write_file(dir.file("bad.safetensors"), "not a safetensors file");
  expect_error(run_shardload({"inspect", dir.file("bad.safetensors")}), 1, "a malformed file");
  write_file(dir.file("map.json"), "{\"physical_to_logical_map\": 3}");
  expect_error(run_shardload({"plan", model, "--expert-map", dir.file("map.json")}), 1,
               "a malformed expert map");
}

TEST(CliUsability, ByteSizeErrorsNameTheirFlag) {
  TempDir dir;
  const CommandResult result =
      run_shardload({"export", tiny(dir), "--out", dir.file("e"), "--max-file-size", "12Q"});
  expect_error(result, 2, "bad size");
  EXPECT_NE(result.err.find("--max-file-size"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("12Q"), std::string::npos) << result.err;
}

TEST(CliUsability, VersionHelpAndSingularCounts) {
  const CommandResult version = run_shardload({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out.rfind("shardload ", 0), 0u) << version.out;
  EXPECT_NE(version.out.find('.'), std::string::npos) << version.out;

  // --io lists its names, not the name -> enum value pairs of the option's transformer.
  const CommandResult help = run_shardload({"load", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const size_t io = help.out.find("--io");
  ASSERT_NE(io, std::string::npos) << help.out;
  const std::string io_help = help.out.substr(io, help.out.find("\n  -", io + 1) - io);
  EXPECT_NE(io_help.find("{auto,pread,mmap,direct}"), std::string::npos) << io_help;
  EXPECT_EQ(io_help.find("->"), std::string::npos) << io_help;

  TempDir dir;
  const std::string model = tiny(dir, "llama");
  const CommandResult one = run_shardload({"load", model});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out.rfind("loaded 1 rank of ", 0), 0u) << one.out;
  const CommandResult exported = run_shardload({"export", model, "--out", dir.file("e")});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(exported.out.rfind("exported 1 rank of ", 0), 0u) << exported.out;
  const CommandResult reloaded = run_shardload({"load", dir.file("e")});
  ASSERT_EQ(reloaded.exit_code, 0) << reloaded.err;
  EXPECT_NE(reloaded.out.find(": 1 rank, "), std::string::npos) << reloaded.out;
}

// vLLM's and SGLang's spellings give the same plan as ours.
TEST(CliUsability, EngineSpellingsOfTheLayoutFlags) {
  TempDir dir;
  const std::string model = tiny(dir);
  const CommandResult ours =
      run_shardload({"plan", model, "--tp", "4", "--ep", "4", "--dtype", "fp16", "--json"});
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--tp-size", "4", "--ep-size", "4", "--dtype", "float16"},
           {"--tensor-parallel-size", "4", "--enable-expert-parallel", "--dtype", "half"},
           {"--tp-size", "4", "--enable-expert-parallel", "--ep", "4", "--dtype", "fp16"}}) {
    std::vector<std::string> command = {"plan", model, "--json"};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult theirs = run_shardload(command);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
    EXPECT_EQ(theirs.out, ours.out) << args[0] << " " << args[2];
  }
  for (const auto& [dtype, name] : std::vector<std::pair<std::string, std::string>>{
           {"float", "F32"}, {"float32", "F32"}, {"bfloat16", "BF16"}, {"half", "F16"}}) {
    const CommandResult plan = run_shardload({"plan", model, "--dtype", dtype, "--json"});
    ASSERT_EQ(plan.exit_code, 0) << dtype << ": " << plan.err;
    EXPECT_EQ(nlohmann::json::parse(plan.out)["dtype"], name) << dtype;
  }
  const CommandResult conflict =
      run_shardload({"plan", model, "--tp", "4", "--ep", "2", "--enable-expert-parallel"});
  expect_error(conflict, 2, "--enable-expert-parallel with another --ep");
}

// plan, export and inspect given an export directory say what it is.
TEST(CliUsability, CommandsGivenAnExportSayItIsOne) {
  TempDir dir;
  const std::string model = tiny(dir);
  ASSERT_EQ(run_shardload({"export", model, "--tp", "2", "--out", dir.file("e")}).exit_code, 0);
  for (const char* command : {"plan", "export"}) {
    std::vector<std::string> args = {command, dir.file("e")};
    if (std::string(command) == "export") args.insert(args.end(), {"--out", dir.file("again")});
    const CommandResult result = run_shardload(args);
    expect_error(result, 2, command);
    EXPECT_NE(result.err.find("is a shardload export"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("shardload load"), std::string::npos) << result.err;
  }
  EXPECT_FALSE(fs::exists(dir.file("again")));
  const CommandResult text = run_shardload({"inspect", dir.file("e")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("a shardload export of Qwen3MoeForCausalLM (tp=2 ep=1"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("model-rank-1-part-0.safetensors"), std::string::npos) << text.out;
  const CommandResult json = run_shardload({"inspect", dir.file("e"), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["export"]["tp_size"], 2);
  EXPECT_EQ(parsed["files"].size(), 2u);
}

// `load --checksum` of a checkpoint and of its export print the same lines, in the same order.
TEST(CliUsability, ChecksumsOfACheckpointAndItsExportAreTheSameText) {
  TempDir dir;
  const std::string model = tiny(dir);
  ASSERT_EQ(
      run_shardload({"export", model, "--tp", "4", "--ep", "2", "--out", dir.file("e")}).exit_code,
      0);
  const CommandResult direct =
      run_shardload({"load", model, "--tp", "4", "--ep", "2", "--checksum"});
  const CommandResult exported = run_shardload({"load", dir.file("e"), "--checksum"});
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  auto lines = [](const std::string& out) { return out.substr(0, out.rfind("loaded ")); };
  EXPECT_GT(lines(direct.out).size(), 1000u);
  EXPECT_EQ(lines(direct.out), lines(exported.out));
}

// Item 7: --out in, at or around the model directory is refused before anything is written, so the
// next load of the checkpoint is still a load of the checkpoint.
TEST(CliUsability, ExportRefusesTheModelDirectory) {
  TempDir dir;
  const std::string model = tiny(dir);
  fs::create_directory_symlink(model, dir.file("link"));
  const std::set<std::string> before = listing(dir.path());
  for (const std::string& out :
       {model, model + "/exported", dir.file("link"), dir.path().string()}) {
    const CommandResult result =
        run_shardload({"export", model, "--tp", "2", "--out", out, "--overwrite"});
    expect_error(result, 2, out);
    EXPECT_NE(result.err.find("--out"), std::string::npos) << result.err;
    EXPECT_EQ(listing(dir.path()), before) << out;
  }
  const CommandResult load = run_shardload({"load", model, "--tp", "2"});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  EXPECT_EQ(load.out.rfind("loaded 2 ranks of Qwen3MoeForCausalLM", 0), 0u) << load.out;
}

// Item 8: a load of an export takes its layout; layout flags that disagree, a manifest whose sizes
// disagree with its ranks, a truncated rank list and a rank file swapped for another rank's are all
// errors naming both values.
TEST(CliUsability, LoadingAnExportChecksItAndTheFlags) {
  TempDir dir;
  const std::string model = tiny(dir);
  const std::string e = dir.file("e");
  ASSERT_EQ(run_shardload({"export", model, "--tp", "4", "--ep", "2", "--out", e}).exit_code, 0);
  EXPECT_EQ(run_shardload({"load", e}).exit_code, 0);
  EXPECT_EQ(
      run_shardload({"load", e, "--tp", "4", "--ep-size", "2", "--dtype", "bfloat16"}).exit_code,
      0);

  const CommandResult tp = run_shardload({"load", e, "--tp", "8"});
  expect_error(tp, 2, "--tp 8 on a tp 4 export");
  EXPECT_NE(tp.err.find("tp_size"), std::string::npos) << tp.err;
  EXPECT_NE(tp.err.find("4"), std::string::npos) << tp.err;
  EXPECT_NE(tp.err.find("8"), std::string::npos) << tp.err;
  expect_error(run_shardload({"load", e, "--ep", "4"}), 2, "--ep 4 on an ep 2 export");
  expect_error(run_shardload({"load", e, "--enable-expert-parallel"}), 2,
               "ep = tp on an ep 2 export");
  expect_error(run_shardload({"load", e, "--dtype", "float32"}), 2, "--dtype on a BF16 export");
  expect_error(run_shardload({"load", e, "--rank", "4"}), 2, "--rank past the export");

  const std::string manifest_text = read_file(e + "/shardload.json");
  nlohmann::json manifest = nlohmann::json::parse(manifest_text);
  manifest["tp_size"] = 8;
  manifest["moe_tp_size"] = 4;
  write_file(e + "/shardload.json", manifest.dump());
  CommandResult result = run_shardload({"load", e});
  expect_error(result, 1, "tp_size disagreeing with the ranks");
  EXPECT_NE(result.err.find("8"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("found 4"), std::string::npos) << result.err;

  manifest = nlohmann::json::parse(manifest_text);
  manifest["ranks"].erase(3);
  write_file(e + "/shardload.json", manifest.dump());
  expect_error(run_shardload({"load", e}), 1, "a truncated ranks list");

  write_file(e + "/shardload.json", manifest_text);
  fs::copy_file(e + "/model-rank-0-part-0.safetensors", e + "/model-rank-3-part-0.safetensors",
                fs::copy_options::overwrite_existing);
  result = run_shardload({"load", e});
  expect_error(result, 1, "rank 3's file swapped for rank 0's");
  EXPECT_NE(result.err.find("model-rank-3-part-0.safetensors"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("expected \"3\", found \"0\""), std::string::npos) << result.err;
}

}  // namespace
}  // namespace shardload
