// A reader in another process that wants one consistent snapshot of the whole model while updates
// commit in several groups (--staging-bytes). Per-file sequence words alone let it copy between
// two groups and accept a mix of old and new tensors; the header's update-in-progress flag and
// version (docs/serve.md) let it refuse every such copy.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class ShmSnapshotTest : public TwoModelsTest<21, 22> {};

TEST_F(ShmSnapshotTest, AWholeUpdateReaderNeverAcceptsAMixAcrossCommitGroups) {
  const Checksums first_sums = expected_checksums(first_, layout(2, 2));
  const Checksums second_sums = expected_checksums(second_, layout(2, 2));
  TestServer server("snapshot", first_, {"--staging-bytes", "256K"});
  const int port = server.port;
  ASSERT_GT(port, 0);

  const TempDir work;
  const std::string stop_path = work.file("stop");
  const std::string result_path = work.file("result");
  const pid_t reader = fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) run_snapshot_reader(server.dir(), stop_path, result_path, first_sums, second_sums);

  // Many groups per update, many updates: a reader trusting the sequence words alone copies
  // between two groups again and again.
  constexpr int kUpdates = 8;
  for (int i = 0; i < kUpdates; ++i) {
    const std::string& model = i % 2 == 0 ? second_ : first_;
    const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", model}});
    EXPECT_EQ(reply.status, 200) << reply.text;
  }
  stop_snapshot_reader(reader, stop_path, result_path);
  if (::testing::Test::HasFatalFailure()) return;

  // The header tells the whole update apart: every rank at the served version, no update running.
  for (const char* file : {"/rank-0.bin", "/rank-1.bin"}) {
    const MappedRankFile mapped(server.dir() + file);
    EXPECT_EQ(mapped.version(), static_cast<uint64_t>(kUpdates)) << file;
    EXPECT_EQ(mapped.update_in_progress(), 0u) << file;
  }
  EXPECT_EQ(served_version(port), static_cast<uint64_t>(kUpdates));
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
