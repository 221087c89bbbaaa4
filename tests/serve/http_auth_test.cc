// Every endpoint but /health needs "Authorization: Bearer KEY" and answers 401 JSON otherwise, before
// any update is attempted: the key of --api-key (or SHARDLOAD_API_KEY), else one the server makes at
// start and keeps in DIR/api-key, which only the directory's readers can read. --insecure-no-api-key
// opens the API, with a warning. --host picks the address.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <random>
#include <string>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class HttpAuthTest : public TwoModelsTest<21, 22> {
 protected:
  static std::vector<std::string> args(const std::string& name,
                                       const std::vector<std::string>& more) {
    return serve_args(first_, name, more);
  }

  static httplib::Headers bearer(const std::string& key) {
    return {{"Authorization", "Bearer " + key}};
  }

  static void expect_unauthorized(const HttpReply& reply) {
    EXPECT_EQ(reply.status, 401) << reply.text;
    ASSERT_TRUE(reply.body.is_object()) << reply.text;
    EXPECT_EQ(reply.body["success"], false);
  }
};

TEST_F(HttpAuthTest, EveryEndpointButHealthNeedsTheKey) {
  TestServer server("key", first_, {"--api-key", "s3cret-key"});
  const int port = server.port;
  ASSERT_GT(port, 0);
  const nlohmann::json update = {{"model_path", second_}};

  // No key, a wrong one, one a byte short, the right one under another scheme.
  for (const httplib::Headers& headers :
       {httplib::Headers{}, bearer("wrong"), bearer("s3cret-ke"), bearer("s3cret-key2"),
        httplib::Headers{{"Authorization", "Basic s3cret-key"}}}) {
    expect_unauthorized(get(port, "/get_model_info", headers));
    expect_unauthorized(get(port, "/weights_checksum", headers));
    expect_unauthorized(get(port, "/no_such_endpoint", headers));
    expect_unauthorized(post(port, "/update_weights_from_disk", update.dump(), "application/json",
                             headers));
    expect_unauthorized(post(port, "/rebalance", R"({"physical_to_logical_map": []})",
                             "application/json", headers));
  }
  const httplib::Result challenge = client(port)->Get("/get_model_info");
  ASSERT_TRUE(challenge);
  EXPECT_EQ(challenge->get_header_value("WWW-Authenticate"), "Bearer");

  // Liveness probes need no key.
  EXPECT_EQ(get(port, "/health").status, 200);

  // Nothing changed; with the key everything works (the scheme is case-insensitive).
  const HttpReply info = get(port, "/get_model_info", bearer("s3cret-key"));
  EXPECT_EQ(info.status, 200) << info.text;
  EXPECT_EQ(info.body.value("version", 99), 0);
  const HttpReply updated = post(port, "/update_weights_from_disk", update.dump(),
                                 "application/json",
                                 httplib::Headers{{"Authorization", "bearer s3cret-key"}});
  EXPECT_EQ(updated.status, 200) << updated.text;
  EXPECT_EQ(get(port, "/get_model_info", bearer("s3cret-key")).body.value("version", 99), 1);
  stop(server);
}

TEST_F(HttpAuthTest, KeyFromTheEnvironmentAndTheOptionWins) {
  {
    TestServer server("env", first_, {}, {"SHARDLOAD_API_KEY=from-env"});
    const int port = server.port;
    ASSERT_GT(port, 0);
    expect_unauthorized(get(port, "/get_model_info"));
    EXPECT_EQ(get(port, "/get_model_info", bearer("from-env")).status, 200);
    stop(server);
  }
  {
    TestServer server("both", first_, {"--api-key", "from-option"}, {"SHARDLOAD_API_KEY=from-env"});
    const int port = server.port;
    ASSERT_GT(port, 0);
    expect_unauthorized(get(port, "/get_model_info", bearer("from-env")));
    EXPECT_EQ(get(port, "/get_model_info", bearer("from-option")).status, 200);
    stop(server);
  }
}

// The default: a key made at start, 64 hex digits, in a file only this user reads; never printed.
TEST_F(HttpAuthTest, WithoutAnOptionTheServerMakesAKeyAndRequiresIt) {
  TestServer server("made", first_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  const std::string file = server.dir() + "/api-key";
  std::string key = read_file(file);
  ASSERT_TRUE(key.ends_with("\n")) << key;
  key.pop_back();
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::lstat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(server.out().find("API key in " + file), std::string::npos) << server.output();
  EXPECT_EQ(server.output().find(key), std::string::npos) << "the key was printed";

  const nlohmann::json update = {{"model_path", second_}};
  expect_unauthorized(get(port, "/get_model_info", httplib::Headers{}));
  expect_unauthorized(post(port, "/update_weights_from_disk", update.dump(), "application/json",
                           httplib::Headers{}));
  EXPECT_EQ(get(port, "/health", httplib::Headers{}).status, 200);
  EXPECT_EQ(post(port, "/update_weights_from_disk", update.dump(), "application/json", bearer(key)).status, 200);
  EXPECT_EQ(get(port, "/get_model_info", bearer(key)).body.value("version", 99), 1);
  stop(server);

  // Another start, another key.
  TestServer next("made", first_);
  ASSERT_GT(next.port, 0);
  EXPECT_NE(read_file(next.dir() + "/api-key"), key + "\n");
  stop(next);
}

TEST_F(HttpAuthTest, InsecureNoApiKeyOpensTheApiAndSaysSo) {
  TestServer server("open", first_, {"--insecure-no-api-key"});
  const int port = server.port;
  ASSERT_GT(port, 0);
  EXPECT_FALSE(std::filesystem::exists(server.dir() + "/api-key"));
  EXPECT_EQ(get(port, "/get_model_info", httplib::Headers{}).status, 200);
  EXPECT_NE(server.err().find("warning: --insecure-no-api-key: every user of this host can rewrite the "
                              "served weights"),
            std::string::npos)
      << server.output();
  stop(server);
  // Not with a key as well.
  const std::string name = unique_name("both-flags");
  const ShmCleanup cleanup(name);
  const FinishedRun run = run_to_exit(args(name, {"--insecure-no-api-key", "--api-key", "k"}));
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
}

TEST_F(HttpAuthTest, HostOptionAndTheWarningWithoutAKey) {
  {
    // Loopback: no warning.
    const std::string name = unique_name("loopback");
    const ShmCleanup cleanup(name);
    ServerProcess server(args(name, {"--host", "127.0.0.1"}));
    const int port = server.wait_for_port_on("127.0.0.1");
    ASSERT_GT(port, 0);
    EXPECT_EQ(get(port, "/health").status, 200);
    stop(server);
    EXPECT_EQ(server.err().find("warning"), std::string::npos) << server.output();
  }
  {
    // Not loopback, the API opened: a warning that names the risk. The address (TEST-NET-1) is on
    // no machine, so the start then fails (exit 1) and nothing is ever served without a key.
    const std::string name = unique_name("exposed");
    const ShmCleanup cleanup(name);
    const FinishedRun run = run_to_exit(args(name, {"--host", "192.0.2.1", "--insecure-no-api-key"}));
    EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
    EXPECT_NE(run.err.find("warning: --insecure-no-api-key: anyone who can reach 192.0.2.1 can rewrite"),
              std::string::npos)
        << run.err;
    EXPECT_NE(run.err.find("cannot listen on 192.0.2.1"), std::string::npos) << run.err;
  }
  {
    // Every address with a key (a fresh one: this server is reachable from elsewhere): no warning.
    const std::string name = unique_name("any-key");
    const ShmCleanup cleanup(name);
    const std::string key = fmt::format("{:016x}{:016x}", std::random_device{}(),
                                        std::random_device{}());
    ServerProcess server(args(name, {"--host", "0.0.0.0", "--api-key", key}));
    const int port = server.wait_for_port_on("0.0.0.0");
    ASSERT_GT(port, 0);
    expect_unauthorized(get(port, "/get_model_info"));
    EXPECT_EQ(get(port, "/get_model_info", bearer(key)).status, 200);
    stop(server);
    EXPECT_EQ(server.err().find("warning"), std::string::npos) << server.output();
  }
}

}  // namespace
}  // namespace shardload::testing
