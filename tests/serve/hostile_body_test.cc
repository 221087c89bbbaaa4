// Request bodies built to exhaust the JSON parser: 120 KB of nested arrays killed shardload-serve
// (a stack overflow). Every endpoint that takes a body now answers 400 with the limit, changes
// nothing, and the server goes on serving.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "run_command.h"
#include "serve_harness.h"

namespace shardload::testing {
namespace {

std::string nested(const std::string& member) {
  return "{\"" + member + "\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
}

TEST(ServeHostileBody, DeeplyNestedBodiesAreRefusedAndTheServerLives) {
  TempDir models;
  const std::string model = make_moe_model(models, "model", 3);
  TestServer server("deep", model);
  const int port = server.port;
  ASSERT_GT(port, 0) << server.output();
  const Checksums before = endpoint_checksums(port);

  for (const auto& [path, member] :
       {std::pair<std::string, std::string>{"/rebalance", "physical_to_logical_map"},
        {"/rebalance", "expert_load"},
        {"/update_weights_from_disk", "weight_name_filter"}}) {
    const HttpReply reply = post(port, path, nested(member));
    EXPECT_EQ(reply.status, 400) << path << " " << member << ": " << reply.text;
    EXPECT_EQ(reply.body["success"], false) << reply.text;
    EXPECT_NE(reply.text.find("nested too deeply"), std::string::npos) << reply.text;
    EXPECT_TRUE(server.running()) << server.output();
  }
  EXPECT_EQ(get(port, "/health").status, 200);
  EXPECT_EQ(endpoint_checksums(port), before);
  EXPECT_EQ(served_version(port), 0u);
  stop(server);
}

// Another local user points an update at a directory of links to a file only the server's user
// can read (here a root-only file standing for /etc/shadow): the answer must not tell its bytes.
TEST(ServeHostileBody, AnUpdateFromLinksToAnotherUsersFileLeaksNothing) {
  constexpr std::string_view kSecret = "root:$6$saltsalt$hunter2hashhash:19000:0:99999:7:::\n";
  TempDir models;
  const std::string model = make_moe_model(models, "model", 3);
  const std::filesystem::path base = models.path();
  write_file((base / "shadow").string(), kSecret);
  ASSERT_EQ(::chmod((base / "shadow").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(base.c_str(), 0711), 0);  // others may pass through, not list or read
  const std::filesystem::path drop = base / "drop";
  std::filesystem::create_directory(drop);
  ASSERT_EQ(::chmod(drop.c_str(), 0777), 0);
  const std::string script = fmt::format(
      "set -e; mkdir {0}/a {0}/b; ln -s {1} {0}/a/config.json; cp {2}/config.json {0}/b/; "
      "ln -s {1} {0}/b/model.safetensors",
      drop.string(), (base / "shadow").string(), model);
  const CommandResult made = run_command({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                          "--clear-groups", "/bin/sh", "-c", script});
  ASSERT_EQ(made.exit_code, 0) << made.err;

  TestServer server("links", model);
  const int port = server.port;
  ASSERT_GT(port, 0) << server.output();
  const Checksums before = endpoint_checksums(port);
  uint64_t length = 0;
  std::memcpy(&length, kSecret.data(), 8);
  for (const char* dir : {"a", "b"}) {
    const HttpReply reply = post(port, "/update_weights_from_disk",
                                 nlohmann::json{{"model_path", (drop / dir).string()}});
    EXPECT_EQ(reply.status, 400) << reply.text;
    EXPECT_EQ(reply.body["success"], false) << reply.text;
    for (const std::string& secret : {std::string("root"), std::string("hunter2"),
                                      std::string("salt"), std::to_string(length)}) {
      EXPECT_EQ(reply.text.find(secret), std::string::npos) << dir << ": " << reply.text;
    }
  }
  EXPECT_EQ(endpoint_checksums(port), before);
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
