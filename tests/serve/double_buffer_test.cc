// serve --double-buffer: two slots per rank file. A reader in another process copying continuously
// while 20 updates switch slots never accepts a mixed snapshot, and each snapshot it accepts is a fresh
// load of one of the two checkpoints; filtered updates and rebalances switch slots the same way, and
// the combinations the second slot cannot serve are refused before anything starts.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class DoubleBufferServeTest : public TwoModelsTest<31, 32> {};

TEST_F(DoubleBufferServeTest, AReaderDuringTwentyUpdatesOnlyEverAcceptsAWholeCheckpoint) {
  const Checksums first_sums = expected_checksums(first_, layout(2, 2));
  const Checksums second_sums = expected_checksums(second_, layout(2, 2));
  TestServer server("double-buffer", first_, {"--double-buffer"});
  const int port = server.port;
  ASSERT_GT(port, 0);

  // The layout readers find: format 2, two whole-page slots per file, slot 0 live after the load.
  const nlohmann::json manifest = read_manifest(server.dir());
  EXPECT_EQ(manifest["format"], "shardload-shm/2");
  EXPECT_EQ(manifest["slots"], 2);
  for (const nlohmann::json& rank : manifest["ranks"]) {
    const uint64_t slot = rank["slot_bytes"].get<uint64_t>();
    EXPECT_EQ(slot % 4096, 0u);
    EXPECT_EQ(rank["bytes"].get<uint64_t>(), 4096 + 2 * slot);
    const MappedRankFile file(server.dir() + "/" + rank["file"].get<std::string>());
    EXPECT_EQ(file.size(), 4096 + 2 * slot);
    EXPECT_EQ(file.active_slot(), 0u);
  }
  EXPECT_EQ(mapped_checksums(server.dir()), first_sums);

  const TempDir work;
  const std::string stop_path = work.file("stop");
  const std::string result_path = work.file("result");
  const pid_t reader = fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) run_snapshot_reader(server.dir(), stop_path, result_path, first_sums, second_sums);

  constexpr int kUpdates = 20;
  for (int i = 0; i < kUpdates; ++i) {
    const std::string& model = i % 2 == 0 ? second_ : first_;
    const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", model}});
    EXPECT_EQ(reply.status, 200) << reply.text;
    if (i == 0) {  // one switch: slot 1 is live and holds the second checkpoint
      EXPECT_EQ(mapped_checksums(server.dir()), second_sums);
      EXPECT_NE(MappedRankFile(server.dir() + "/rank-0.bin").active_slot(), 0u);
    }
  }
  stop_snapshot_reader(reader, stop_path, result_path);
  if (::testing::Test::HasFatalFailure()) return;

  // 20 switches: back on slot 0 with the first checkpoint, every header at version 20.
  expect_headers_at(server.dir(), kUpdates);
  const nlohmann::json after = read_manifest(server.dir());
  for (const nlohmann::json& rank : after["ranks"]) {
    EXPECT_EQ(MappedRankFile(server.dir() + "/" + rank["file"].get<std::string>()).active_slot(), 0u);
  }
  EXPECT_EQ(mapped_checksums(server.dir()), first_sums);
  EXPECT_EQ(endpoint_checksums(port), first_sums);
  stop(server);
}

TEST_F(DoubleBufferServeTest, FilteredUpdatesAndRebalancesSwitchSlotsAndServeFreshLoads) {
  TestServer server("double-buffer-filtered", first_, {"--double-buffer"});
  const int port = server.port;
  ASSERT_GT(port, 0);
  // The experts of the second checkpoint, twice (the second copies nothing but them), then attention.
  for (int i = 0; i < 2; ++i) {
    const HttpReply reply = post(port, "/update_weights_from_disk",
                                 {{"model_path", second_}, {"weight_name_filter", {"mlp.experts."}}});
    ASSERT_EQ(reply.status, 200) << reply.text;
  }
  ASSERT_EQ(post(port, "/update_weights_from_disk", {{"model_path", second_}, {"weight_name_filter", {"self_attn."}}})
                .status,
            200);
  // What a server that never double-buffered serves after the same three updates.
  {
    TestServer single("double-buffer-single", first_);
    for (const char* filter : {"mlp.experts.", "mlp.experts.", "self_attn."}) {
      ASSERT_EQ(post(single.port, "/update_weights_from_disk",
                     {{"model_path", second_}, {"weight_name_filter", {filter}}})
                    .status,
                200);
    }
    EXPECT_EQ(mapped_checksums(server.dir()), mapped_checksums(single.dir()));
    stop(single);
  }
  // A rebalance: the bytes of a fresh load under the new map of the same mix.
  const HttpReply moved = post(port, "/rebalance", {{"physical_to_logical_map", moved_map()}});
  ASSERT_EQ(moved.status, 200) << moved.text;
  const HttpReply full = post(port, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(full.status, 200) << full.text;
  ParallelConfig parallel = layout(2, 2);
  parallel.expert_map = moved_map();
  EXPECT_EQ(mapped_checksums(server.dir()), expected_checksums(second_, parallel));
  expect_headers_at(server.dir(), 5);
  stop(server);
}

TEST(DoubleBufferServeUsage, CombinationsItCannotServeAreRefusedBeforeStarting) {
  const TempDir dir;
  const std::string model = make_moe_model(dir, "model", 33);
  for (const std::vector<std::string>& more : {std::vector<std::string>{"--staging-bytes", "1M"},
                                               std::vector<std::string>{"--device", "cuda"}}) {
    const ServeName name("double-buffer-usage");
    std::vector<std::string> args = {"--double-buffer"};
    args.insert(args.end(), more.begin(), more.end());
    const FinishedRun run = run_to_exit(serve_args(model, name.name(), args));
    EXPECT_EQ(run.exit_code, 2) << more[0] << ": " << run.err;
    EXPECT_NE(run.err.find("--double-buffer"), std::string::npos) << run.err;
  }
}

}  // namespace
}  // namespace shardload::testing
