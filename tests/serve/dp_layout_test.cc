// The weight server on a data-parallel attention layout (layout.md "Data-parallel attention"): the
// manifest and /get_model_info carry dp_size, attn_tp_size, dp_style and scopes; the rank files hold
// what a fresh load of the layout gives, before and after an update; a restart reuses the memory
// only under the same scopes.
#include <gtest/gtest.h>

#include <string>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class ServeDpLayout : public TwoModelsTest<21, 22> {};

ParallelConfig dp_layout() {
  ParallelConfig p = layout(4, 2);
  p.dp = 2;
  p.replicate_dense_mlp = true;
  return p;
}

const std::vector<std::string> kDpFlags = {"--dp-size", "2", "--enable-dp-attention", "--moe-dense-tp-size",
                                           "1", "--keep"};

TEST_F(ServeDpLayout, ServesUpdatesAndReusesOnlyTheSameScopes) {
  const std::string name = unique_name("dp");
  const ShmCleanup cleanup(name);
  {
    ServerProcess server(serve_args(first_, name, kDpFlags, 4, 2));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    const nlohmann::json manifest = read_manifest(cleanup.dir());
    EXPECT_EQ(manifest["dp_size"], 2);
    EXPECT_EQ(manifest["attn_tp_size"], 2);
    EXPECT_EQ(manifest["dp_style"], "sglang");
    EXPECT_EQ(manifest["scopes"]["dense_mlp"], "replicated");
    EXPECT_EQ(manifest["scopes"]["attention"], "attention");
    const HttpReply info = get(port, "/get_model_info");
    EXPECT_EQ(info.body.value("dp_size", 0), 2) << info.text;
    EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, dp_layout()));
    const HttpReply update = post(port, "/update_weights_from_disk", {{"model_path", second_}});
    EXPECT_EQ(update.status, 200) << update.text;
    EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(second_, dp_layout()));
    stop(server);
  }
  {
    // The same layout again: the kept memory is reused as it is.
    ServerProcess server(serve_args(second_, name, kDpFlags, 4, 2));
    ASSERT_GT(server.wait_for_port(), 0);
    EXPECT_EQ(server.out().find("reloading"), std::string::npos) << server.output();
    stop(server);
  }
  // The plain layout of the same sizes: other cuts, so the memory is reloaded, saying why.
  ServerProcess server(serve_args(second_, name, {"--keep"}, 4, 2));
  ASSERT_GT(server.wait_for_port(), 0);
  EXPECT_NE(server.out().find("reloading: manifest dp_size differs"), std::string::npos) << server.output();
  EXPECT_FALSE(read_manifest(cleanup.dir()).contains("dp_size"));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(second_, layout(4, 2)));
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
