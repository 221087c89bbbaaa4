// POST /rebalance on a real server: an explicit physical-to-logical map, or expert loads placed by
// EPLB, move experts in the mapped shared memory to exactly what a fresh load with that map gives;
// a bad map changes nothing; a kept directory keeps its map across a restart.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "serve_harness.h"
#include "shardload/eplb.h"
#include "shardload/reload.h"

namespace shardload::testing {
namespace {

constexpr int kMoeLayers = 3;  // tiny qwen3_moe: layer 0 is dense
constexpr int kExperts = 8;

class ServeRebalanceTest : public OneModelTest<5> {
 protected:
  std::unique_ptr<ServerProcess> start(const std::string& name, bool keep,
                                       const std::string& model = model_) {
    return std::make_unique<ServerProcess>(serve_args(
        model, name, keep ? std::vector<std::string>{"--keep"} : std::vector<std::string>{}));
  }

  static ParallelConfig with_map(const std::vector<std::vector<int>>& map) {
    ParallelConfig parallel = layout(2, 2);
    parallel.expert_map = map;
    return parallel;
  }
};

// Every layer's experts in reverse: each EP rank now holds the other rank's experts.
std::vector<std::vector<int>> reversed_map() {
  std::vector<std::vector<int>> map(kMoeLayers);
  for (auto& row : map) {
    for (int p = 0; p < kExperts; ++p) row.push_back(kExperts - 1 - p);
  }
  return map;
}

TEST_F(ServeRebalanceTest, ExplicitMapMovesExpertsInPlace) {
  const std::string name = unique_name("map");
  const ShmCleanup cleanup(name);
  auto server = start(name, false);
  const int port = server->wait_for_port();
  ASSERT_GT(port, 0);
  const MappedRankFile rank1(cleanup.dir() + "/rank-1.bin");
  const uint64_t sequence = rank1.sequence();

  const auto map = reversed_map();
  const HttpReply reply = post(port, "/rebalance", {{"physical_to_logical_map", map}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["success"], true);
  EXPECT_EQ(reply.body["version"], 1);
  EXPECT_EQ(reply.body["physical_to_logical_map"], nlohmann::json(map));
  EXPECT_GT(reply.body["num_updated_tensors"].get<uint64_t>(), 0u);

  const Checksums expected = expected_checksums(model_, with_map(map));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected);
  EXPECT_EQ(endpoint_checksums(port), expected);
  EXPECT_EQ(rank1.sequence() % 2, 0u);
  EXPECT_GT(rank1.sequence(), sequence);
  const nlohmann::json manifest = read_manifest(cleanup.dir());
  EXPECT_EQ(manifest["physical_to_logical_map"], nlohmann::json(map));
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(served_version(port), 1u);
  stop(*server);
}

// After an update from checkpoint B filtered to attention, a rebalance moves the served experts
// (A's, not B's and not a mix) and reads nothing: both checkpoint directories are gone by then.
TEST_F(ServeRebalanceTest, AfterAFilteredUpdateMovesTheLiveBytesWithoutTheCheckpoint) {
  TempDir dir;
  const std::string a = dir.file("a");
  std::filesystem::copy(model_, a, std::filesystem::copy_options::recursive);
  const std::string b = make_moe_model(dir, "b", 6);
  const std::string name = unique_name("live");
  const ShmCleanup cleanup(name);
  auto server = start(name, false, a);
  const int port = server->wait_for_port();
  ASSERT_GT(port, 0);
  const HttpReply update = post(port, "/update_weights_from_disk",
                                {{"model_path", b}, {"weight_name_filter", {"self_attn"}}});
  ASSERT_EQ(update.status, 200) << update.text;

  const auto map = reversed_map();
  LiveModel reference = load_live(a, with_map(map));
  update_weights(reference, b, {.substrings = {"self_attn"}});
  const Checksums expected = live_checksums(reference);
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);

  const HttpReply reply = post(port, "/rebalance", {{"physical_to_logical_map", map}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 2);
  EXPECT_NE(reply.body.value("message", "").find("nothing read from storage"), std::string::npos)
      << reply.text;
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected);
  EXPECT_EQ(endpoint_checksums(port), expected);
  stop(*server);
}

TEST_F(ServeRebalanceTest, ExpertLoadIsPlacedByEplb) {
  const std::string name = unique_name("load");
  const ShmCleanup cleanup(name);
  auto server = start(name, false);
  const int port = server->wait_for_port();
  ASSERT_GT(port, 0);

  const std::vector<std::vector<double>> load = {{90, 132, 40, 61, 104, 165, 39, 4},
                                                 {20, 107, 104, 64, 19, 197, 187, 157},
                                                 {1, 2, 3, 4, 5, 6, 7, 800}};
  const HttpReply reply = post(port, "/rebalance", {{"expert_load", load}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  // P = the current 8 physical experts, M = EP = 2 GPUs, G = 1 (no n_group), N = 1.
  const EplbResult placed =
      rebalance_experts(EplbInput{.load = load, .replicas = 8, .groups = 1, .nodes = 1, .gpus = 2});
  EXPECT_EQ(reply.body["physical_to_logical_map"], nlohmann::json(placed.physical_to_logical_map));
  EXPECT_EQ(mapped_checksums(cleanup.dir()),
            expected_checksums(model_, with_map(placed.physical_to_logical_map)));
  stop(*server);
}

TEST_F(ServeRebalanceTest, BadMapsAreRejectedWithoutChange) {
  const std::string name = unique_name("badmap");
  const ShmCleanup cleanup(name);
  auto server = start(name, false);
  const int port = server->wait_for_port();
  ASSERT_GT(port, 0);
  const Checksums before = mapped_checksums(cleanup.dir());
  const MappedRankFile rank0(cleanup.dir() + "/rank-0.bin");
  const uint64_t sequence = rank0.sequence();

  auto unknown_expert = reversed_map();
  unknown_expert[1][3] = 99;
  auto short_row = reversed_map();
  short_row[2].pop_back();
  auto missing_layer = reversed_map();
  missing_layer.pop_back();
  for (const auto& map : {unknown_expert, short_row, missing_layer}) {
    const HttpReply reply = post(port, "/rebalance", {{"physical_to_logical_map", map}});
    EXPECT_EQ(reply.status, 400) << reply.text;
    EXPECT_EQ(reply.body["success"], false);
    EXPECT_FALSE(reply.body.value("message", "").empty());
  }
  // EPLB cannot place 8 slots for loads of the wrong width or count either.
  const HttpReply bad_load = post(port, "/rebalance", {{"expert_load", {{1.0, 2.0}}}});
  EXPECT_EQ(bad_load.status, 400) << bad_load.text;

  EXPECT_EQ(rank0.sequence(), sequence);
  EXPECT_EQ(served_version(port), 0u);
  EXPECT_EQ(mapped_checksums(cleanup.dir()), before);
  EXPECT_EQ(read_manifest(cleanup.dir())["version"], 0);
  stop(*server);
}

TEST_F(ServeRebalanceTest, KeptDirectoryKeepsItsMapAcrossARestart) {
  const std::string name = unique_name("keepmap");
  const ShmCleanup cleanup(name);
  const auto map = reversed_map();
  {
    auto server = start(name, true);
    const int port = server->wait_for_port();
    ASSERT_GT(port, 0);
    ASSERT_EQ(post(port, "/rebalance", {{"physical_to_logical_map", map}}).status, 200);
    stop(*server);
  }
  // No --expert-map this time: the directory's own map is the layout, so nothing is reloaded.
  auto server = start(name, false);
  const int port = server->wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(server->out().find("reusing"), std::string::npos) << server->output();
  EXPECT_EQ(server->out().find("reloading"), std::string::npos) << server->output();
  EXPECT_EQ(served_version(port), 1u);
  const Checksums expected = expected_checksums(model_, with_map(map));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected);
  EXPECT_EQ(endpoint_checksums(port), expected);
  stop(*server);
}

}  // namespace
}  // namespace shardload::testing
