// The weight server's commit contract (docs/reload.md), seen from a reader's side on one node: a
// change that could not begin changes nothing; once it began, every header is published at the new
// version with its flag clear even when the manifest cannot be written (the reply says so in
// `warnings`, and the manifest keeps update_in_progress so that a restart reloads); and a restart
// reuses a kept directory only when every byte in it is the checkpoint asked for.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class CommitContractTest : public TwoModelsTest<61, 62> {};

// The manifest cannot be written after the commit (as on a full /dev/shm): the update and the
// rebalance still succeed, published in every header, and say what happened.
TEST_F(CommitContractTest, AManifestThatCannotBeWrittenAfterTheCommitStillPublishesTheChange) {
  TestServer server("publish-fail", first_, {}, {"SHARDLOAD_FAULT=fail_every:publish_manifest"});
  ASSERT_GT(server.port, 0) << server.output();
  const ParallelConfig parallel = layout(2, 2);

  HttpReply reply = post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["success"], true);
  EXPECT_EQ(reply.body["version"], 1);
  ASSERT_EQ(reply.body["warnings"].size(), 1u) << reply.text;
  EXPECT_NE(reply.body["warnings"][0].get<std::string>().find("publish_manifest"),
            std::string::npos)
      << reply.text;
  expect_headers_at(server.dir(), 1);
  EXPECT_EQ(mapped_checksums(server.dir()), expected_checksums(second_, parallel));
  EXPECT_EQ(served_version(server.port), 1u);
  // The manifest on disk still shows the state before the change, marked in progress: a restart
  // does not trust it.
  EXPECT_EQ(read_manifest(server.dir())["update_in_progress"], true);

  LiveModel reference = load_live(second_, parallel);
  rebalance_experts(reference, moved_map());
  reply = post(server.port, "/rebalance", {{"physical_to_logical_map", moved_map()}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 2);
  EXPECT_EQ(reply.body["warnings"].size(), 1u) << reply.text;
  expect_headers_at(server.dir(), 2);
  EXPECT_EQ(mapped_checksums(server.dir()), live_checksums(reference));
  EXPECT_EQ(endpoint_checksums(server.port), live_checksums(reference));
  stop(server);
}

// A change that cannot begin (its first manifest write fails) changes nothing: no flag, no
// version, no byte; the next one goes through.
TEST_F(CommitContractTest, AChangeThatCannotBeginChangesNothing) {
  TestServer server("begin-fail", first_, {}, {"SHARDLOAD_FAULT=fail_at:begin_manifest"});
  ASSERT_GT(server.port, 0) << server.output();
  const ParallelConfig parallel = layout(2, 2);
  HttpReply reply = post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
  EXPECT_EQ(reply.status, 400) << reply.text;
  EXPECT_EQ(reply.body["version"], 0);
  EXPECT_NE(reply.body["message"].get<std::string>().find("nothing was changed"), std::string::npos)
      << reply.text;
  expect_headers_at(server.dir(), 0);
  EXPECT_EQ(read_manifest(server.dir())["update_in_progress"], false);
  EXPECT_EQ(mapped_checksums(server.dir()), expected_checksums(first_, parallel));

  reply = post(server.port, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_FALSE(reply.body.contains("warnings")) << reply.text;
  expect_headers_at(server.dir(), 1);
  EXPECT_EQ(read_manifest(server.dir())["version"], 1);
  EXPECT_EQ(read_manifest(server.dir())["update_in_progress"], false);
  EXPECT_EQ(mapped_checksums(server.dir()), expected_checksums(second_, parallel));
  stop(server);
}

// A whole update from the second checkpoint, then the first's experts: the manifest names the
// first checkpoint (the last update) but most bytes are the second's. A restart on the first must
// reload, not reuse; after a whole update from the first, it reuses.
TEST_F(CommitContractTest, ARestartReusesOnlyBytesThatAreAllTheCheckpointAskedFor) {
  const std::string name = unique_name("sources");
  const ShmCleanup cleanup(name);
  const ParallelConfig parallel = layout(2, 2);
  {
    ServerProcess server(serve_args(first_, name, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0) << server.output();
    ASSERT_EQ(post(port, "/update_weights_from_disk", {{"model_path", second_}}).status, 200);
    const HttpReply reply = post(port, "/update_weights_from_disk",
                                 {{"model_path", first_}, {"weight_name_filter", {"mlp.experts"}}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    const nlohmann::json sources = read_manifest(cleanup.dir())["sources"];
    ASSERT_EQ(sources.size(), 2u) << sources.dump();
    EXPECT_NE(sources[0]["model_path"].get<std::string>().find("second"), std::string::npos);
    EXPECT_FALSE(sources[0].contains("filter"));
    EXPECT_NE(sources[1]["model_path"].get<std::string>().find("first"), std::string::npos);
    EXPECT_EQ(sources[1]["filter"]["substrings"], nlohmann::json({"mlp.experts"}));
    EXPECT_EQ(get(port, "/get_model_info").body["sources"], sources);
    stop(server);
  }
  {
    ServerProcess server(serve_args(first_, name, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0) << server.output();
    EXPECT_NE(server.out().find("reloading"), std::string::npos) << server.output();
    EXPECT_EQ(server.out().find("reusing"), std::string::npos) << server.output();
    EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, parallel));
    EXPECT_EQ(served_version(port), 3u);  // above the kept version 2
    stop(server);
  }
  {
    ServerProcess server(serve_args(first_, name, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0) << server.output();
    EXPECT_NE(server.out().find("reusing"), std::string::npos) << server.output();
    EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, parallel));
    stop(server);
  }
}

}  // namespace
}  // namespace shardload::testing
