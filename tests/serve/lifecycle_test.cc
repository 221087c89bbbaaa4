// The life of the shared memory across server processes: removed on SIGTERM, kept with --keep and
// reused by a restart that matches it, reloaded when it does not match or when a server was killed
// with SIGKILL in the middle of a commit (the sequence word says so).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class ServeLifecycleTest : public TwoModelsTest<11, 12> {
 protected:
  static std::vector<std::string> args(const std::string& model, const std::string& name, int tp,
                                       int ep, const std::vector<std::string>& more = {}) {
    return serve_args(model, name, more, tp, ep);
  }
};

TEST_F(ServeLifecycleTest, SigtermRemovesTheSharedMemory) {
  const std::string name = unique_name("sigterm");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, 2, 2));
  ASSERT_GT(server.wait_for_port(), 0);
  EXPECT_TRUE(std::filesystem::exists(cleanup.dir() + "/manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(cleanup.dir() + "/rank-1.bin"));
  stop(server);
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir())) << server.output();
}

TEST_F(ServeLifecycleTest, SigintStopsTheServerToo) {
  const std::string name = unique_name("sigint");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, 1, 1));
  ASSERT_GT(server.wait_for_port(), 0);
  server.signal(SIGINT);
  EXPECT_EQ(server.wait_exit(), 0) << server.output();
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir()));
}

TEST_F(ServeLifecycleTest, KeptMemoryIsReusedByAMatchingRestartAndReloadedOtherwise) {
  const std::string name = unique_name("keep");
  const ShmCleanup cleanup(name);
  {
    ServerProcess server(args(first_, name, 2, 2, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", second_}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    stop(server);
  }
  ASSERT_TRUE(std::filesystem::exists(cleanup.dir() + "/manifest.json"));
  const Checksums second_sums = expected_checksums(second_, layout(2, 2));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), second_sums);

  // The directory now holds the second checkpoint at version 1: serving that model reuses it.
  {
    ServerProcess server(args(second_, name, 2, 2, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    EXPECT_NE(server.out().find("reusing"), std::string::npos) << server.output();
    EXPECT_EQ(server.out().find("reloading"), std::string::npos) << server.output();
    EXPECT_EQ(served_version(port), 1u);
    EXPECT_EQ(endpoint_checksums(port), second_sums);
    EXPECT_EQ(mapped_checksums(cleanup.dir()), second_sums);
    stop(server);
  }
  // Another model: reloaded, with one line saying why; the version goes on from the kept one (a
  // reader that mapped the files must never see it go back).
  {
    ServerProcess server(args(first_, name, 2, 2));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    EXPECT_NE(server.out().find("reloading: manifest model_path"), std::string::npos)
        << server.output();
    EXPECT_EQ(served_version(port), 2u);
    EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, layout(2, 2)));
    stop(server);
  }
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir()));
}

TEST_F(ServeLifecycleTest, AnotherLayoutReloadsAndDropsStaleRankFiles) {
  const std::string name = unique_name("layout");
  const ShmCleanup cleanup(name);
  {
    ServerProcess server(args(first_, name, 2, 2, {"--keep"}));
    ASSERT_GT(server.wait_for_port(), 0);
    stop(server);
  }
  ASSERT_TRUE(std::filesystem::exists(cleanup.dir() + "/rank-1.bin"));
  ServerProcess server(args(first_, name, 1, 1, {"--keep"}));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(server.out().find("reloading: "), std::string::npos) << server.output();
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir() + "/rank-1.bin"));
  EXPECT_EQ(read_manifest(cleanup.dir())["ranks"].size(), 1u);
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, layout(1, 1)));
  EXPECT_EQ(endpoint_checksums(port), expected_checksums(first_, layout(1, 1)));
  stop(server);
}

TEST_F(ServeLifecycleTest, ASecondServerOnTheSameNameIsRefused) {
  const std::string name = unique_name("twice");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, 2, 2));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  const FinishedRun second = run_to_exit(args(first_, name, 2, 2));
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("another shardload serve"), std::string::npos) << second.err;
  // The first one is untouched.
  EXPECT_EQ(get(port, "/health").status, 200);
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, layout(2, 2)));
  stop(server);
}

TEST_F(ServeLifecycleTest, BadNamesAndOptionsAreRefusedBeforeAnyWork) {
  for (const std::string& name :
       {std::string("../escape"), std::string("a/b"), std::string("..")}) {
    const FinishedRun result = run_to_exit({first_, "--name", name, "--port", "0"});
    EXPECT_EQ(result.exit_code, 2) << name << ": " << result.err;  // a usage error
    EXPECT_EQ(result.err.rfind("error: ", 0), 0u) << result.err;
  }
  const std::string name = unique_name("badmodel");
  const ShmCleanup cleanup(name);
  const FinishedRun missing = run_to_exit({models_->file("absent"), "--name", name, "--port", "0"});
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(cleanup.dir()));
}

TEST_F(ServeLifecycleTest, APortInUseFailsTheStartAndLeavesNoSharedMemory) {
  const std::string name = unique_name("port");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, 1, 1));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  const std::string other = unique_name("port");
  const ShmCleanup other_cleanup(other);
  const FinishedRun second = run_to_exit({first_, "--name", other, "--port", std::to_string(port)});
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("cannot listen"), std::string::npos) << second.err;
  EXPECT_FALSE(std::filesystem::exists(other_cleanup.dir()));
  stop(server);
}

// The server is killed while a commit is paused with the sequence word odd (the test-only fault
// hook SHARDLOAD_FAULT=commit_pause_ms), after three updates. A reader sees the odd word and the
// header's update flag and knows the bytes are torn; a restart sees them too and reloads, ending
// with even words, the checkpoint's bytes and a version above every one served before (3), so that
// readers comparing versions never see one come back.
TEST_F(ServeLifecycleTest, SigkillDuringACommitIsDetectedAndReloadedOnRestart) {
  const std::string name = unique_name("sigkill");
  const ShmCleanup cleanup(name);
  const Checksums first_sums = expected_checksums(first_, layout(2, 2));
  {
    ServerProcess server(args(first_, name, 2, 2), {"SHARDLOAD_FAULT=commit_pause_ms:1000"});
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    for (int i = 0; i < 3; ++i) {
      const std::string& model = i % 2 == 0 ? second_ : first_;
      ASSERT_EQ(post(port, "/update_weights_from_disk", {{"model_path", model}}).status, 200);
    }
    const MappedRankFile rank0(cleanup.dir() + "/rank-0.bin");
    ASSERT_EQ(rank0.sequence() % 2, 0u);
    EXPECT_EQ(rank0.version(), 3u);
    EXPECT_EQ(rank0.update_in_progress(), 0u);
    // The update never answers: the server dies under it (the client then sees a closed
    // connection).
    std::thread update([&] { post(port, "/update_weights_from_disk", {{"model_path", first_}}); });
    const auto deadline = Clock::now() + kRequestTimeout;
    while (rank0.sequence() % 2 == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    const uint64_t at_kill = rank0.sequence();
    server.signal(SIGKILL);
    EXPECT_EQ(server.wait_exit(), 128 + SIGKILL);
    update.join();
    ASSERT_EQ(at_kill % 2, 1u) << "the commit never started\n" << server.output();
    EXPECT_EQ(rank0.sequence(), at_kill);  // nobody ended the commit
    EXPECT_EQ(rank0.update_in_progress(), 1u);
    EXPECT_EQ(read_manifest(cleanup.dir())["update_in_progress"], true);
    EXPECT_EQ(read_manifest(cleanup.dir())["version"], 3);
  }
  ServerProcess server(args(first_, name, 2, 2));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(server.out().find("reloading: sequence word of rank 0 is odd (killed during a commit)"),
            std::string::npos)
      << server.output();
  for (const char* file : {"/rank-0.bin", "/rank-1.bin"}) {
    const MappedRankFile mapped(cleanup.dir() + file);
    EXPECT_EQ(mapped.sequence() % 2, 0u) << file;
    EXPECT_EQ(mapped.version(), 4u) << file;
    EXPECT_EQ(mapped.update_in_progress(), 0u) << file;
  }
  EXPECT_EQ(served_version(port), 4u);
  EXPECT_EQ(read_manifest(cleanup.dir())["version"], 4);
  EXPECT_EQ(read_manifest(cleanup.dir())["update_in_progress"], false);
  EXPECT_EQ(mapped_checksums(cleanup.dir()), first_sums);
  EXPECT_EQ(endpoint_checksums(port), first_sums);
  // The next update goes on from there.
  const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 5);
  stop(server);
}

// A restart after SIGKILL with no manifest left (killed while a load rewrote the directory) still
// goes on from the version in the rank headers.
TEST_F(ServeLifecycleTest, AReloadWithoutAManifestContinuesFromTheHeaderVersion) {
  const std::string name = unique_name("nomanifest");
  const ShmCleanup cleanup(name);
  {
    ServerProcess server(args(first_, name, 2, 2, {"--keep"}));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    for (int i = 0; i < 2; ++i) {
      const std::string& model = i % 2 == 0 ? second_ : first_;
      ASSERT_EQ(post(port, "/update_weights_from_disk", {{"model_path", model}}).status, 200);
    }
    stop(server);
  }
  std::filesystem::remove(cleanup.dir() + "/manifest.json");
  ServerProcess server(args(first_, name, 2, 2));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(server.out().find("reloading: no usable manifest.json"), std::string::npos)
      << server.output();
  EXPECT_EQ(served_version(port), 3u);
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
