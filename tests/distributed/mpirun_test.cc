// `shardload load` and `export` under `mpirun --oversubscribe -np N` on this machine, one node per
// process: every node's ranks equal a single-process load byte for byte (the --checksum lines),
// striped reads take each needed byte once, balanced, local reads send nothing, the export equals a
// single-process export, and a failure on one node is the same error on every node, in bounded
// time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unistd.h>

#include "mpirun_env.h"
#include "run_command.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_matrix.h"
#include "test_paths.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::TempDir;

#ifdef SHARDLOAD_MPIEXEC
constexpr const char* kMpiexec = SHARDLOAD_MPIEXEC;
#else
constexpr const char* kMpiexec = nullptr;
#endif
constexpr const char* kTimeoutSeconds = "300";  // a hang fails the test instead of the suite

class MpirunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kMpiexec == nullptr) GTEST_SKIP() << "built without MPI";
    ::shardload::testing::use_mpirun_as_tests_do();
  }
};

// mpirun -np N, with `shell` (run by sh -c, $NODE set to the process's node) as each process's
// command: the way a test gives one node other files or a fault.
CommandResult mpirun_shell(int np, const std::string& shell,
                           const char* timeout_seconds = kTimeoutSeconds) {
  return run_command({"/usr/bin/timeout", timeout_seconds, kMpiexec, "--oversubscribe", "-np",
                      std::to_string(np), "/bin/sh", "-c",
                      "NODE=$OMPI_COMM_WORLD_RANK; export NODE; " + shell});
}

CommandResult mpirun(int np, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", kTimeoutSeconds, kMpiexec,
                                   "--oversubscribe",  "-np",           std::to_string(np),
                                   testing::shardload_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

CommandResult shardload(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testing::shardload_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

// The --checksum lines of a load's output (rank, name, dtype, shape, hash), in order.
std::string checksum_lines(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  std::string lines;
  while (std::getline(in, line)) {
    if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0])) &&
        line.find('\t') != std::string::npos)
      lines += line + "\n";
  }
  return lines;
}

// The JSON summary a distributed load --json prints last.
nlohmann::json summary(const std::string& out) {
  const size_t at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}

std::string make_model(const TempDir& dir, const std::string& arch, const std::string& quant,
                       int experts = -1) {
  TinyOptions options;
  options.arch = arch;
  options.quant = quant;
  options.out = dir.file(arch + "-" + quant);
  options.seed = 11;
  options.experts = experts;
  make_tiny(options);
  return options.out;
}

bool is_moe(const std::string& arch) {
  return arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen3_5";
}

// Striped: each needed byte read once, the busiest node within 1.1x of the mean. Local: nothing
// sent.
void check_traffic(const nlohmann::json& s, const std::string& policy, int np) {
  ASSERT_EQ(s["nodes"], np);
  ASSERT_EQ(s["read"], policy);
  uint64_t read = 0;
  uint64_t most = 0;
  uint64_t sent = 0;
  uint64_t received = 0;
  for (const nlohmann::json& node : s["per_node"]) {
    read += node["bytes_read"].get<uint64_t>();
    most = std::max(most, node["bytes_read"].get<uint64_t>());
    sent += node["bytes_sent"].get<uint64_t>();
    received += node["bytes_received"].get<uint64_t>();
  }
  if (policy == "striped") {
    EXPECT_EQ(read, s["bytes_needed"].get<uint64_t>());
    EXPECT_LE(static_cast<double>(most), 1.1 * static_cast<double>(read) / np);
    EXPECT_EQ(sent, received);
  } else {
    EXPECT_EQ(sent, 0u);
    EXPECT_EQ(received, 0u);
  }
}

// What plan --nodes says each node receives: the loader receives exactly that (and the plan's
// chunks hold only bytes a node's ranks read: read_assignment_test).
void check_received_as_planned(const nlohmann::json& s, const std::string& model,
                               const std::vector<std::string>& layout, int np) {
  std::vector<std::string> args = {"plan", model, "--json", "--nodes", std::to_string(np)};
  args.insert(args.end(), layout.begin(), layout.end());
  const CommandResult plan = shardload(args);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json planned = nlohmann::json::parse(plan.out)["distributed"]["per_node"];
  for (int n = 0; n < np; ++n) {
    EXPECT_EQ(s["per_node"][n]["bytes_received"], planned[n]["bytes_received"]) << "node " << n;
    EXPECT_EQ(s["per_node"][n]["bytes_read"], planned[n]["bytes_read"]) << "node " << n;
  }
}

struct Family {
  std::string arch;
  std::string quant;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.arch << " " << f.quant; }

class MpirunFamilyTest : public MpirunTest, public ::testing::WithParamInterface<Family> {};

// Every family in bf16, static FP8 and block FP8: 2 nodes striped, each node's ranks equal to a
// single-process load. 4 nodes striped (through O_DIRECT) and 2 nodes local run on a dense family
// and the two MoE families with the most kinds of pieces (fused QKV, MLA, block scales, shared
// experts): the read policies do not depend on the family beyond those, and CI's time is bounded.
TEST_P(MpirunFamilyTest, EveryNodesRanksEqualASingleProcessLoad) {
  // The other families add no kind of piece to the read policies: `make test` runs these three, each in
  // one format (bf16, per-tensor FP8 with its scales merged, block FP8's grids), and `make test-matrix`
  // (SHARDLOAD_TEST_MATRIX=1) every family in every format.
  const std::string& family = GetParam().arch;
  const std::string& quant = GetParam().quant;
  const bool core = (family == "llama" && quant == "none") || (family == "qwen3_moe" && quant == "fp8") ||
                    (family == "deepseek_v3" && quant == "fp8-block");
  if (!core && !testing::matrix_run()) {
    GTEST_SKIP() << "a matrix case (make test-matrix runs every family in every format)";
  }
  TempDir dir;
  const std::string model = make_model(dir, GetParam().arch, GetParam().quant);
  const std::vector<std::string> layout = {"--tp", "4", "--ep",
                                           is_moe(GetParam().arch) ? "4" : "1"};
  std::vector<std::string> args = {"load", model, "--checksum"};
  args.insert(args.end(), layout.begin(), layout.end());
  const CommandResult single = shardload(args);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const std::string expected = checksum_lines(single.out);
  ASSERT_FALSE(expected.empty());
  args.push_back("--json");
  const std::string& arch = GetParam().arch;
  std::vector<std::pair<int, std::string>> runs = {{2, "striped"}};
  if (arch == "llama" || arch == "qwen3_moe" || arch == "deepseek_v3") {
    runs.insert(runs.end(), {{4, "striped"}, {2, "local"}});
  }
  // 4 nodes read through O_DIRECT (aligned reads around each chunk), 2 through the page cache.
  for (const auto& [np, policy] : runs) {
    SCOPED_TRACE(::testing::Message() << np << " nodes, " << policy);
    std::vector<std::string> node_args = args;
    node_args.insert(node_args.end(), {"--read", policy, "--io", np == 4 ? "direct" : "pread"});
    const CommandResult run = mpirun(np, node_args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(checksum_lines(run.out), expected);
    const nlohmann::json s = summary(run.out);
    check_traffic(s, policy, np);
    if (policy == "striped") check_received_as_planned(s, model, layout, np);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MpirunFamilyTest, ::testing::ValuesIn([] {
                           std::vector<Family> out;
                           for (const std::string& arch : tiny_architectures()) {
                             for (const char* quant : {"none", "fp8", "fp8-block"}) {
                               if (std::string_view(quant) == "none" || tiny_writes_fp8(arch))
                                 out.push_back({arch, quant});
                             }
                           }
                           return out;
                         }()),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           std::string name = info.param.arch + "_" + info.param.quant;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The bytes of every file under a directory, by relative path.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) {
      out[fs::relative(entry.path(), root).string()] =
          ::shardload::testing::read_file(entry.path().string());
    }
  }
  return out;
}

// 3 nodes need a rank count 3 divides: 6 ranks with DP attention (attention and lm_head whole on
// each rank, experts split 6 ways), and a dense model fully replicated over 3 ranks (every byte
// broadcast to every node); loaded and exported.
TEST_F(MpirunTest, ThreeNodesLoadDataParallelLayouts) {
  TempDir dir;
  struct Layout {
    std::string model;
    std::vector<std::string> flags;
  };
  const std::vector<Layout> layouts = {
      {make_model(dir, "qwen3_moe", "none", 12),
       {"--tp", "6", "--ep", "6", "--dp", "6", "--enable-dp-lm-head"}},
      {make_model(dir, "llama", "none"),
       {"--tp", "3", "--dp", "3", "--enable-dp-lm-head", "--moe-dense-tp-size", "1"}}};
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.model);
    std::vector<std::string> args = {"load", layout.model, "--checksum"};
    args.insert(args.end(), layout.flags.begin(), layout.flags.end());
    const CommandResult single = shardload(args);
    ASSERT_EQ(single.exit_code, 0) << single.err;
    args.push_back("--json");
    const CommandResult run = mpirun(3, args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(checksum_lines(run.out), checksum_lines(single.out));
    check_traffic(summary(run.out), "striped", 3);
    // The same layout exported by 3 nodes equals the single-process export.
    const std::string single_out = dir.file("single-" + fs::path(layout.model).filename().string());
    const std::string nodes_out = dir.file("nodes-" + fs::path(layout.model).filename().string());
    std::vector<std::string> export_args = {"export", layout.model, "--out", single_out};
    export_args.insert(export_args.end(), layout.flags.begin(), layout.flags.end());
    ASSERT_EQ(shardload(export_args).exit_code, 0);
    export_args[3] = nodes_out;
    const CommandResult exported = mpirun(3, export_args);
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
    EXPECT_EQ(tree(nodes_out), tree(single_out));
  }
}

TEST_F(MpirunTest, AnExportFromSeveralNodesEqualsASingleProcessExport) {
  TempDir dir;
  const std::string model = make_model(dir, "deepseek_v3", "fp8-block");
  const std::vector<std::string> layout = {"--tp", "4", "--ep", "4", "--max-file-size", "200K"};
  std::vector<std::string> args = {"export", model, "--out", dir.file("single")};
  args.insert(args.end(), layout.begin(), layout.end());
  ASSERT_EQ(shardload(args).exit_code, 0);
  const auto expected = tree(dir.file("single"));
  for (const auto& [np, policy] :
       std::vector<std::pair<int, std::string>>{{2, "striped"}, {4, "local"}}) {
    const std::string out = dir.file("nodes-" + std::to_string(np));
    std::vector<std::string> node_args = {"export", model, "--out", out, "--read", policy};
    node_args.insert(node_args.end(), layout.begin(), layout.end());
    const CommandResult run = mpirun(np, node_args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(tree(out), expected) << np << " nodes";
  }
  // Nothing staged is left beside --out.
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find("shardload-tmp"), std::string::npos)
        << entry.path();
  }
}

// An export for an engine (--engine vllm: renamed tensors, attention buffers, q/k norms recast) is
// written by each node for its ranks as a single process writes it.
TEST_F(MpirunTest, AnEngineExportFromSeveralNodesEqualsASingleProcessExport) {
  TempDir dir;
  for (const std::string arch : {"qwen3_moe", "deepseek_v3"}) {
    const std::string model = make_model(dir, arch, "none");
    const std::vector<std::string> layout = {"--tp", "4", "--ep", "4", "--engine", "vllm"};
    std::vector<std::string> args = {"export", model, "--out", dir.file(arch + "-single")};
    args.insert(args.end(), layout.begin(), layout.end());
    ASSERT_EQ(shardload(args).exit_code, 0);
    args[3] = dir.file(arch + "-nodes");
    const CommandResult run = mpirun(2, args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(tree(dir.file(arch + "-nodes")), tree(dir.file(arch + "-single"))) << arch;
  }
}

// A failed run: every node printed the same error line, naming the failing node (counted in the
// merged stderr of all nodes, whose lines the launcher may interleave). `np`: the nodes that print.
void expect_same_error_on_every_node(const CommandResult& run, int np, const std::string& error) {
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.exit_code, 124) << "timed out: a node waited on a failed peer\n" << run.err;
  size_t count = 0;
  for (size_t at = run.err.find(error); at != std::string::npos; at = run.err.find(error, at + 1))
    ++count;
  EXPECT_EQ(count, static_cast<size_t>(np)) << run.err;
  EXPECT_EQ(run.out.find(error), std::string::npos);
}

TEST_F(MpirunTest, AnInjectedReadErrorOnOneNodeIsTheSameErrorOnEveryNode) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none", 12);
  const CommandResult run = mpirun_shell(
      3, "if [ $NODE = 1 ]; then export SHARDLOAD_FAULT=read_error_after:400000; fi; exec " +
             testing::shardload_bin() + " load " + model +
             " --tp 6 --ep 6 --dp 6 --enable-dp-lm-head");
  expect_same_error_on_every_node(run, 3, "node 1 of 3: read failed: Input/output error");
}

TEST_F(MpirunTest, AShardMissingOnOneNodeIsTheSameErrorOnEveryNode) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none");
  const std::string partial = dir.file("partial");
  fs::copy(model, partial);
  fs::remove(fs::path(partial) / "model-00002-of-00003.safetensors");
  const CommandResult run =
      mpirun_shell(2, "m=" + model + "; if [ $NODE = 1 ]; then m=" + partial + "; fi; exec " +
                          testing::shardload_bin() + " load $m --tp 2 --ep 2");
  expect_same_error_on_every_node(run, 2,
                                  "node 1 of 2: the index names a file that does not exist");
}

TEST_F(MpirunTest, ATruncatedShardIsTheSameErrorOnEveryNode) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none");
  const fs::path shard = fs::path(model) / "model-00002-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  const CommandResult run =
      mpirun(2, {"export", model, "--tp", "2", "--ep", "2", "--out", dir.file("out")});
  expect_same_error_on_every_node(run, 2, "node 0 of 2: file ends before the last tensor");
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

// A node that hangs (alive, but taking no part) before it sends anything: the other two wait on
// it in the striped transfers (and, reading locally, in the gather that ends the load), name it
// after --stall-timeout, each printing the same error, and the job ends. The outer timeout is short:
// a job that hangs fails the test (exit 124) in a minute.
TEST_F(MpirunTest, ANodeThatHangsIsTheSameStallErrorOnEveryOtherNode) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none", 12);
  for (const char* policy : {"striped", "local"}) {
    SCOPED_TRACE(policy);
    const CommandResult run = mpirun_shell(
        3,
        "if [ $NODE = 1 ]; then export SHARDLOAD_FAULT=hang_at:node_load; fi; exec " +
            testing::shardload_bin() + " load " + model +
            " --tp 6 --ep 6 --dp 6 --enable-dp-lm-head --stall-timeout 3 --read " + policy,
        "60");
    expect_same_error_on_every_node(run, 2, "error: node 1 of 3: stalled");
  }
}

// A node that dies mid-load ends the job (the launcher stops the others) instead of hanging it.
TEST_F(MpirunTest, ANodeThatDiesEndsTheJob) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none");
  const CommandResult run = mpirun_shell(
      2, "if [ $NODE = 1 ]; then export SHARDLOAD_FAULT=kill_after_read:200000; fi; exec " +
             testing::shardload_bin() + " load " + model + " --tp 2 --ep 2");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.exit_code, 124) << "timed out: the job hung on a dead node";
}

// A node count that does not divide the layout's ranks is the command line's mistake: exit status 2,
// as every usage error, from load, export and serve alike (it was 1), on every node, before
// anything is read or started.
TEST_F(MpirunTest, ANodeCountThatDoesNotDivideTheRanksIsAUsageError) {
  TempDir dir;
  const std::string model = make_model(dir, "qwen3_moe", "none");
  const std::string name = "mpirun-usage-" + std::to_string(getpid());
  const std::vector<std::vector<std::string>> commands = {
      {"load", model, "--tp", "4"},
      {"export", model, "--tp", "4", "--out", dir.file("out")},
      {"serve", model, "--tp", "4", "--port", "0", "--name", name},
  };
  for (const std::vector<std::string>& args : commands) {
    const CommandResult run = mpirun(3, args);
    EXPECT_EQ(run.exit_code, 2) << args[0] << ": " << run.err;
    expect_same_error_on_every_node(run, 3, "the node count must divide the rank count");
  }
  EXPECT_FALSE(fs::exists(dir.file("out")));
  for (int node = 0; node < 3; ++node) {
    EXPECT_FALSE(fs::exists("/dev/shm/shardload-" + name + ".node-" + std::to_string(node)));
  }
}

}  // namespace
}  // namespace shardload
