// `shardload serve` on several nodes: `mpirun --oversubscribe -np N` on this machine, one node per
// process. After every step each node's shared memory equals a fresh single-process load of the
// same weights and expert map (checksums of the mapped files, not the server's word for it); a
// failed update on one node changes no byte on any node; a node killed while staging, agreeing or
// committing ends the job, and a restart on the same name ends equal to a fresh load with versions
// that never go back; a reader on each node never accepts a torn or mixed snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "mpirun_env.h"
#include "serve_harness.h"
#include "shardload/reload.h"

namespace shardload::testing {
namespace {

#ifdef SHARDLOAD_MPIEXEC
constexpr const char* kMpiexec = SHARDLOAD_MPIEXEC;
#else
constexpr const char* kMpiexec = nullptr;
#endif

constexpr int kTp = 4;  // 4 ranks: 2 per node on 2 nodes, 1 on 4
constexpr int kEp = 4;

// Every node directory of NAME on N nodes, removed when the test ends.
class ClusterName {
 public:
  ClusterName(const std::string& test, int nodes) : name_(unique_name(test)), nodes_(nodes) {
    for (int n = 0; n < nodes; ++n) cleanups_.push_back(std::make_unique<DirCleanup>(dir(n)));
  }
  const std::string& name() const { return name_; }
  std::string dir(int node) const { return node_shm_dir(name_, node, nodes_); }
  int nodes() const { return nodes_; }

 private:
  struct DirCleanup {
    explicit DirCleanup(std::string d) : dir(std::move(d)) {}
    ~DirCleanup() {
      std::error_code error;
      std::filesystem::remove_all(dir, error);
    }
    std::string dir;
  };
  std::string name_;
  int nodes_;
  std::vector<std::unique_ptr<DirCleanup>> cleanups_;
};

// mpirun -np N shardload serve MODEL ... under a deadline; `fault` (SHARDLOAD_FAULT) goes to node
// `fault_node` only.
std::vector<std::string> launcher(int nodes, const std::string& fault = {}, int fault_node = 1,
                                  const std::string& timeout_seconds = "300") {
  return {"/usr/bin/timeout",
          timeout_seconds,
          kMpiexec,
          "--oversubscribe",
          "-np",
          std::to_string(nodes),
          "/bin/sh",
          "-c",
          fmt::format("if [ \"$OMPI_COMM_WORLD_RANK\" = {} ] && [ -n '{}' ]; then "
                      "SHARDLOAD_FAULT='{}'; export SHARDLOAD_FAULT; fi; exec \"$0\" \"$@\"",
                      fault_node, fault, fault)};
}

class ClusterServer : public ServerProcess {
 public:
  ClusterServer(const ClusterName& name, const std::string& model,
                const std::vector<std::string>& more = {}, const std::string& fault = {},
                int fault_node = 1, const std::string& timeout_seconds = "300")
      : ServerProcess(serve_args(model, name.name(), more, kTp, kEp), {},
                      launcher(name.nodes(), fault, fault_node, timeout_seconds)),
        port(wait_for_port()) {}
  const int port;
};

// The pids of the node processes of NAME (shardload-serve with --name NAME).
std::vector<pid_t> node_pids(const std::string& name) {
  std::vector<pid_t> out;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    std::string cmdline;
    try {
      cmdline = read_file(entry.path().string() + "/cmdline");
    } catch (const std::exception&) {
      continue;  // gone meanwhile
    }
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find("shardload-serve ") != std::string::npos &&
        cmdline.find(" --name " + name + " ") != std::string::npos) {
      out.push_back(std::stoi(pid));
    }
  }
  return out;
}

// Stops the job cleanly as docs/distributed.md tells operators: SIGTERM to the node processes
// (node 0 stops serving and tells the others; they wait for it), not to mpirun, which would kill
// the nodes 1 s later, maybe before they removed their directories. Every node removes its
// directory (unless --keep) and the job exits 0.
void stop_cluster(ServerProcess& server, const ClusterName& name, bool kept = false) {
  const std::vector<pid_t> pids = node_pids(name.name());
  ASSERT_EQ(pids.size(), static_cast<size_t>(name.nodes())) << server.output();
  for (pid_t pid : pids) ::kill(pid, SIGTERM);
  EXPECT_EQ(server.wait_exit(), 0) << server.output();
  for (int n = 0; n < name.nodes(); ++n) {
    EXPECT_EQ(std::filesystem::exists(name.dir(n)), kept) << n << "\n" << server.output();
  }
}

// Every node's mapped files, merged: what readers on the nodes see.
Checksums cluster_checksums(const ClusterName& name) {
  Checksums out;
  for (int n = 0; n < name.nodes(); ++n) {
    const Checksums node = mapped_checksums(name.dir(n));
    out.insert(node.begin(), node.end());
  }
  return out;
}

// The checksums of the ranks node `node` of `nodes` holds.
Checksums node_part(const Checksums& all, int node, int nodes) {
  const NodeRanks held = node_ranks(kTp, nodes, node);
  Checksums out;
  for (const auto& [key, hash] : all) {
    const int rank = std::stoi(key.substr(0, key.find('/')));
    if (rank >= held.first && rank < held.last) out[key] = hash;
  }
  return out;
}

// Every node's manifest and every rank header at `version`, clean (no update in progress, even
// sequence words), each manifest naming its node and ranks.
void expect_nodes_at(const ClusterName& name, uint64_t version) {
  for (int n = 0; n < name.nodes(); ++n) {
    SCOPED_TRACE(::testing::Message() << "node " << n);
    const nlohmann::json manifest = read_manifest(name.dir(n));
    EXPECT_EQ(manifest["version"], version);
    EXPECT_EQ(manifest["update_in_progress"], false);
    EXPECT_EQ(manifest["node"], n);
    EXPECT_EQ(manifest["nodes"], name.nodes());
    const NodeRanks held = node_ranks(kTp, name.nodes(), n);
    EXPECT_EQ(manifest["node_ranks"], nlohmann::json({held.first, held.last - 1}));
    expect_headers_at(name.dir(n), version);
  }
}

// Every rank header on every node at `version`, clean (the manifests may lag: see the contract).
void expect_node_headers_at(const ClusterName& name, uint64_t version) {
  for (int n = 0; n < name.nodes(); ++n) expect_headers_at(name.dir(n), version);
}

// The highest version any node's manifest or header shows (a killed job's leftovers).
uint64_t highest_version(const ClusterName& name) {
  uint64_t highest = 0;
  for (int n = 0; n < name.nodes(); ++n) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(name.dir(n), error)) {
      const std::string file = entry.path().filename().string();
      if (file == "manifest.json") {
        highest = std::max(highest, read_manifest(name.dir(n)).value("version", uint64_t{0}));
      } else if (file.starts_with("rank-")) {
        highest = std::max(highest, MappedRankFile(entry.path().string()).version());
      }
    }
  }
  return highest;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new TempDir();
    first_ = make_moe_model(*models_, "first", 41);
    second_ = make_moe_model(*models_, "second", 42);
    TinyOptions fp8;
    fp8.arch = "qwen3_moe";
    fp8.quant = "fp8";
    fp8.out = models_->file("first-fp8");
    fp8.seed = 43;
    make_tiny(fp8);
    first_fp8_ = fp8.out;
    fp8.out = models_->file("second-fp8");
    fp8.seed = 44;
    make_tiny(fp8);
    second_fp8_ = fp8.out;
  }
  static void TearDownTestSuite() {
    delete models_;
    models_ = nullptr;
  }
  void SetUp() override {
    if (kMpiexec == nullptr) GTEST_SKIP() << "built without MPI";
    use_mpirun_as_tests_do();
  }

  static inline TempDir* models_ = nullptr;
  static inline std::string first_, second_, first_fp8_, second_fp8_;
};

struct Case {
  int nodes;
  bool fp8;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.nodes << " nodes" << (c.fp8 ? ", fp8" : "");
}

class ClusterChangeTest : public ClusterTest, public ::testing::WithParamInterface<Case> {};

TEST_P(ClusterChangeTest, UpdatesAndARebalanceEqualAFreshLoadOnEveryNode) {
  const int nodes = GetParam().nodes;
  const std::string& first = GetParam().fp8 ? first_fp8_ : first_;
  const std::string& second = GetParam().fp8 ? second_fp8_ : second_;
  const ParallelConfig parallel = layout(kTp, kEp);
  const ClusterName name("cluster", nodes);
  ClusterServer server(name, first);
  ASSERT_GT(server.port, 0) << server.output();
  EXPECT_EQ(cluster_checksums(name), expected_checksums(first, parallel));
  expect_nodes_at(name, 0);
  const HttpReply info = get(server.port, "/get_model_info");
  ASSERT_EQ(info.status, 200);
  ASSERT_EQ(info.body["nodes"].size(), static_cast<size_t>(nodes));
  EXPECT_EQ(info.body["nodes"][nodes - 1]["shm_dir"], name.dir(nodes - 1));

  // A whole update: every checkpoint byte a node needs is read once in the cluster.
  HttpReply reply = post(server.port, "/update_weights_from_disk", {{"model_path", second}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 1);
  ASSERT_EQ(reply.body["nodes"].size(), static_cast<size_t>(nodes));
  uint64_t sent = 0;
  uint64_t received = 0;
  for (const nlohmann::json& node : reply.body["nodes"]) {
    EXPECT_EQ(node["version"], 1);
    EXPECT_GT(node["bytes_read"].get<uint64_t>(), 0u);
    sent += node["bytes_sent"].get<uint64_t>();
    received += node["bytes_received"].get<uint64_t>();
  }
  EXPECT_EQ(sent, received);
  EXPECT_EQ(cluster_checksums(name), expected_checksums(second, parallel));
  expect_nodes_at(name, 1);
  // Every node's manifest names the checkpoint its bytes now are, as /get_model_info does (a
  // --keep restart compares it).
  const nlohmann::json model_path = get(server.port, "/get_model_info").body["model_path"];
  EXPECT_NE(model_path.get<std::string>().find("second"), std::string::npos) << model_path;
  for (int n = 0; n < nodes; ++n) EXPECT_EQ(read_manifest(name.dir(n))["model_path"], model_path);

  // A filtered update: the experts of the first checkpoint over the second's other weights.
  LiveModel reference = load_live(second, parallel);
  WeightFilter experts;
  experts.substrings = {"experts"};
  update_weights(reference, first, experts);
  reply = post(server.port, "/update_weights_from_disk",
               {{"model_path", first}, {"weight_name_filter", {"experts"}}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(cluster_checksums(name), live_checksums(reference));
  expect_nodes_at(name, 2);

  // A rebalance reads nothing from storage: slots cross nodes from live memory.
  rebalance_experts(reference, moved_map());
  reply = post(server.port, "/rebalance", {{"physical_to_logical_map", moved_map()}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  sent = 0;
  for (const nlohmann::json& node : reply.body["nodes"]) {
    EXPECT_EQ(node["bytes_read"], 0);
    sent += node["bytes_sent"].get<uint64_t>();
  }
  EXPECT_GT(sent, 0u);
  EXPECT_EQ(cluster_checksums(name), live_checksums(reference));
  EXPECT_EQ(endpoint_checksums(server.port), live_checksums(reference));
  expect_nodes_at(name, 3);
  for (int n = 0; n < nodes; ++n) {
    EXPECT_EQ(read_manifest(name.dir(n))["physical_to_logical_map"], nlohmann::json(moved_map()));
  }
  stop_cluster(server, name);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterChangeTest,
                         ::testing::Values(Case{2, false}, Case{4, true}));

// A node that fails (an injected error on it alone) fails the update on every node: the answer
// names the node, and no byte, version or flag changed anywhere.
TEST_F(ClusterTest, AFailedUpdateOnOneNodeChangesNothingOnAnyNode) {
  const ParallelConfig parallel = layout(kTp, kEp);
  for (const auto& [nodes, point, culprit] :
       std::vector<std::tuple<int, std::string, int>>{{2, "stage", 1}, {4, "update_open", 2}}) {
    SCOPED_TRACE(::testing::Message() << nodes << " nodes, failing at " << point);
    const ClusterName name("cluster-fail", nodes);
    ClusterServer server(name, first_, {}, "fail_at:" + point, culprit);
    ASSERT_GT(server.port, 0) << server.output();
    const HttpReply reply =
        post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
    EXPECT_EQ(reply.status, 400) << reply.text;
    EXPECT_EQ(reply.body["success"], false);
    const std::string message = reply.body["message"].get<std::string>();
    EXPECT_NE(message.find(fmt::format("node {} of {}", culprit, nodes)), std::string::npos)
        << message;
    EXPECT_NE(message.find("injected failure at " + point), std::string::npos) << message;
    EXPECT_EQ(reply.body["version"], 0);
    EXPECT_EQ(cluster_checksums(name), expected_checksums(first_, parallel));
    expect_nodes_at(name, 0);
    // The fault fires once: the next update goes through on every node.
    const HttpReply again =
        post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
    EXPECT_EQ(again.status, 200) << again.text;
    EXPECT_EQ(cluster_checksums(name), expected_checksums(second_, parallel));
    expect_nodes_at(name, 1);
    stop_cluster(server, name);
  }
}

// Every rank header of every node at `version`, clean (the manifests aside).
// The commit protocol on several nodes: a commit that fails on one node is run again on every
// node from the same staging, so the nodes end at one version with the new bytes; a manifest that
// cannot be written after the commit is a warning naming the node, every header still publishes
// the new version, and no flag stays set.
TEST_F(ClusterTest, AFailureInsideOrAfterTheCommitEndsConsistentOnEveryNode) {
  const ParallelConfig parallel = layout(kTp, kEp);
  {
    // A node that cannot begin (its manifest write fails) stops every node before any byte changes;
    // node 0, which began, clears its flags again.
    const ClusterName name("cluster-begin", 2);
    ClusterServer server(name, first_, {}, "fail_at:begin_manifest", 1);
    ASSERT_GT(server.port, 0) << server.output();
    const HttpReply reply =
        post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
    EXPECT_EQ(reply.status, 400) << reply.text;
    EXPECT_NE(reply.body["message"].get<std::string>().find("nothing was changed"),
              std::string::npos)
        << reply.text;
    EXPECT_EQ(cluster_checksums(name), expected_checksums(first_, parallel));
    expect_nodes_at(name, 0);
    stop_cluster(server, name);
  }
  {
    const ClusterName name("cluster-commit", 2);
    ClusterServer server(name, first_, {}, "fail_at:commit", 1);
    ASSERT_GT(server.port, 0) << server.output();
    const HttpReply reply =
        post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    EXPECT_EQ(reply.body["version"], 1);
    EXPECT_EQ(cluster_checksums(name), expected_checksums(second_, parallel));
    expect_nodes_at(name, 1);
    stop_cluster(server, name);
  }
  {
    const ClusterName name("cluster-publish", 2);
    ClusterServer server(name, first_, {}, "fail_every:publish_manifest", 1);
    ASSERT_GT(server.port, 0) << server.output();
    HttpReply reply = post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    EXPECT_EQ(reply.body["version"], 1);
    ASSERT_EQ(reply.body["warnings"].size(), 1u) << reply.text;
    EXPECT_TRUE(reply.body["warnings"][0].get<std::string>().starts_with("node 1: ")) << reply.text;
    expect_node_headers_at(name, 1);
    EXPECT_EQ(cluster_checksums(name), expected_checksums(second_, parallel));
    EXPECT_EQ(read_manifest(name.dir(0))["version"], 1);
    EXPECT_EQ(read_manifest(name.dir(1))["update_in_progress"], true);  // a restart reloads

    LiveModel reference = load_live(second_, parallel);
    rebalance_experts(reference, moved_map());
    reply = post(server.port, "/rebalance", {{"physical_to_logical_map", moved_map()}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    EXPECT_EQ(reply.body["version"], 2);
    EXPECT_EQ(reply.body["warnings"].size(), 1u) << reply.text;
    expect_node_headers_at(name, 2);
    EXPECT_EQ(cluster_checksums(name), live_checksums(reference));
    stop_cluster(server, name);
  }
}

// A checkpoint path that only some nodes see (here /proc/self/cwd/checkpoint, with each node in
// its own working directory and only node 0's holding the checkpoint) fails the update on every
// node, naming the node that could not open it, and changes nothing.
TEST_F(ClusterTest, ACheckpointOnlySomeNodesSeeFailsTheUpdateCleanly) {
  const ParallelConfig parallel = layout(kTp, kEp);
  const TempDir cwd;
  std::filesystem::create_directories(cwd.file("node-0"));
  std::filesystem::create_directories(cwd.file("node-1"));
  std::filesystem::create_directory_symlink(second_, cwd.file("node-0") + "/checkpoint");
  const ClusterName name("cluster-path", 2);
  std::vector<std::string> per_node_cwd = launcher(2);
  per_node_cwd.back() = fmt::format("cd '{}'/node-$OMPI_COMM_WORLD_RANK && exec \"$0\" \"$@\"",
                                    cwd.path().string());
  ServerProcess server(serve_args(first_, name.name(), {}, kTp, kEp), {}, per_node_cwd);
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const HttpReply reply =
      post(port, "/update_weights_from_disk", {{"model_path", "/proc/self/cwd/checkpoint"}});
  EXPECT_EQ(reply.status, 400) << reply.text;
  const std::string message = reply.body["message"].get<std::string>();
  EXPECT_NE(message.find("node 1 of 2"), std::string::npos) << message;
  EXPECT_NE(message.find("/proc/self/cwd/checkpoint"), std::string::npos) << message;
  EXPECT_EQ(cluster_checksums(name), expected_checksums(first_, parallel));
  expect_nodes_at(name, 0);
  stop_cluster(server, name);
}

// A node killed (SIGKILL) at each phase of an update ends the whole job, and a restart on the
// same name finds every node's state, reloads what is not consistent and ends equal to a fresh
// load, at a version no lower than any the killed job showed.
TEST_F(ClusterTest, ANodeKilledAtEachPhaseEndsTheJobAndARestartRecovers) {
  const ParallelConfig parallel = layout(kTp, kEp);
  const Checksums first_sums = expected_checksums(first_, parallel);
  for (const std::string phase : {"stage", "agree", "commit"}) {
    SCOPED_TRACE("killed at " + phase);
    const ClusterName name("cluster-kill", 2);
    {
      ClusterServer server(name, first_, {"--keep"}, "kill_at:" + phase);
      ASSERT_GT(server.port, 0) << server.output();
      const HttpReply reply =
          post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
      EXPECT_NE(reply.status, 200) << reply.text;
      const std::optional<int> code = server.wait_exit(kRequestTimeout);
      ASSERT_TRUE(code.has_value()) << "the job did not end: " << server.output();
      EXPECT_NE(*code, 0);
    }
    const uint64_t seen = highest_version(name);
    ClusterServer restarted(name, first_, {"--keep"});
    ASSERT_GT(restarted.port, 0) << restarted.output();
    EXPECT_EQ(cluster_checksums(name), first_sums);
    const uint64_t version = served_version(restarted.port);
    EXPECT_GE(version, seen);
    // A job killed before any node committed leaves clean directories, reused as they are.
    if (phase != "commit") {
      EXPECT_NE(restarted.out().find("reusing"), std::string::npos) << restarted.out();
    } else {
      EXPECT_GT(version, seen) << restarted.out();
    }
    expect_nodes_at(name, version);
    const HttpReply next =
        post(restarted.port, "/update_weights_from_disk", {{"model_path", second_}});
    EXPECT_EQ(next.status, 200) << next.text;
    expect_nodes_at(name, version + 1);
    stop_cluster(restarted, name, /*kept=*/true);
    expect_nodes_at(name, version + 1);  // clean
  }
}

// A --keep restart of the cluster compares, on every node, what its bytes were read from with what
// the path names now: `latest` moved to another checkpoint between the runs is reloaded everywhere.
TEST_F(ClusterTest, AKeepRestartThroughAMovedLinkReloadsOnEveryNode) {
  const ClusterName name("cluster-link", 2);
  const TempDir dir;
  const std::string latest = dir.file("latest");
  std::filesystem::create_directory_symlink(first_, latest);
  {
    ClusterServer server(name, latest, {"--keep"});
    ASSERT_GT(server.port, 0) << server.output();
    stop_cluster(server, name, /*kept=*/true);
  }
  std::filesystem::remove(latest);
  std::filesystem::create_directory_symlink(second_, latest);
  ClusterServer restarted(name, latest, {"--keep"});
  ASSERT_GT(restarted.port, 0) << restarted.output();
  EXPECT_NE(restarted.out().find("the model path now resolves to"), std::string::npos) << restarted.output();
  EXPECT_EQ(cluster_checksums(name), expected_checksums(second_, layout(kTp, kEp)));
  EXPECT_EQ(endpoint_checksums(restarted.port), expected_checksums(second_, layout(kTp, kEp)));
  stop_cluster(restarted, name, /*kept=*/true);
}

// A node that hangs while staging an update (alive, but taking no part) would hold every node
// forever. With --stall-timeout the others name it: node 0 answers the update with that error, and
// since no command can run on the cluster without that node the job ends, every live node printing
// the same error. The outer timeout is short: a job that hangs fails the test in a minute.
TEST_F(ClusterTest, ANodeThatHangsDuringAnUpdateEndsTheJobNamingIt) {
  const ClusterName name("cluster-hang", 4);
  ClusterServer server(name, first_, {"--stall-timeout", "3"}, "hang_at:stage", 1, "60");
  ASSERT_GT(server.port, 0) << server.output();
  const HttpReply reply =
      post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
  EXPECT_NE(reply.status, 200) << reply.text;
  EXPECT_NE(reply.status, 0) << "no answer: " << server.output();
  EXPECT_NE(reply.text.find("node 1 of 4: stalled"), std::string::npos) << reply.text;
  const std::optional<int> code = server.wait_exit(kRequestTimeout);
  ASSERT_TRUE(code.has_value()) << "the job did not end: " << server.output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(*code, 124) << "timed out: the job hung on the stalled node\n" << server.output();
  const std::string err = server.err();
  const std::string error = "error: node 1 of 4: stalled";
  size_t count = 0;
  for (size_t at = err.find(error); at != std::string::npos; at = err.find(error, at + 1)) ++count;
  EXPECT_EQ(count, 3u) << server.output();  // nodes 0, 2 and 3
}

// A reader on every node (docs/serve.md's recipe over its node's files) never accepts a torn tensor
// or a snapshot mixing versions while updates commit on every node.
TEST_F(ClusterTest, ReadersOnEveryNodeNeverAcceptAMixedSnapshot) {
  constexpr int kNodes = 2;
  const ParallelConfig parallel = layout(kTp, kEp);
  const Checksums first_sums = expected_checksums(first_, parallel);
  const Checksums second_sums = expected_checksums(second_, parallel);
  const ClusterName name("cluster-readers", kNodes);
  ClusterServer server(name, first_);
  ASSERT_GT(server.port, 0) << server.output();
  const TempDir work;
  const std::string stop_path = work.file("stop");
  std::vector<pid_t> readers;
  for (int n = 0; n < kNodes; ++n) {
    const pid_t reader = fork();
    ASSERT_GE(reader, 0);
    if (reader == 0) {
      run_snapshot_reader(name.dir(n), stop_path, work.file(fmt::format("result-{}", n)),
                          node_part(first_sums, n, kNodes), node_part(second_sums, n, kNodes));
    }
    readers.push_back(reader);
  }
  constexpr int kUpdates = 6;
  for (int i = 0; i < kUpdates; ++i) {
    const HttpReply reply = post(server.port, "/update_weights_from_disk",
                                 {{"model_path", i % 2 == 0 ? second_ : first_}});
    EXPECT_EQ(reply.status, 200) << reply.text;
  }
  write_file(stop_path, std::string_view("stop"));
  for (int n = 0; n < kNodes; ++n) {
    int status = 0;
    const auto deadline = Clock::now() + kRequestTimeout;
    while (waitpid(readers[static_cast<size_t>(n)], &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(readers[static_cast<size_t>(n)], SIGKILL);
        waitpid(readers[static_cast<size_t>(n)], &status, 0);
        ADD_FAILURE() << "the reader of node " << n << " never accepted a snapshot";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "node " << n
        << " accepted, mixed: " << read_file(work.file(fmt::format("result-{}", n)));
  }
  expect_nodes_at(name, kUpdates);
  stop_cluster(server, name);
}

}  // namespace
}  // namespace shardload::testing
