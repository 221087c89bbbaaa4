// Every failure of an update leaves every live byte as it was (and the version), whatever stage it
// hits: a missing, truncated or corrupt file, a layout or dtype mismatch, an I/O error after data
// was staged, a file changed under the reader, cancellation, a bad FP8 scale found by
// post-processing; and a failure between commit groups says what it left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/fault_injection.h"
#include "reload_fixture.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"

namespace shardload {
namespace {

using namespace ::shardload::testing;
namespace fs = std::filesystem;

class UpdateFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = make_model(dir_, "qwen3_moe", 1, "fp8");
    b_ = make_model(dir_, "qwen3_moe", 2, "fp8");
    live_ = load_live(a_, layout(2, 2));
    before_ = snapshot(live_);
    where_ = addresses(live_);
  }
  void TearDown() override {
    fault::configure("");
    fault::after_bytes_read(0, nullptr);
  }

  static uint64_t data_bytes(const std::string& model) {
    const Checkpoint ckpt = Checkpoint::open(model);
    uint64_t bytes = 0;
    for (const SafetensorsFile& f : ckpt.files()) bytes += f.header().data_bytes();
    return bytes;
  }

  // Runs the update, expects an Error of `kind`, then checks that nothing changed.
  std::string expect_failure(const std::string& path, ErrorKind kind,
                             const WeightFilter& filter = {}, const UpdateOptions& options = {}) {
    std::string message;
    try {
      update_weights(live_, path, filter, options);
      ADD_FAILURE() << "the update succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      message = e.what();
    }
    expect_unchanged(before_, live_);
    EXPECT_EQ(addresses(live_), where_);
    EXPECT_EQ(live_.version, 0u);
    EXPECT_EQ(live_.model_path, a_);
    return message;
  }

  // A copy of checkpoint b that a test may damage.
  std::string copy_of_b() {
    const std::string out = dir_.file("b-copy");
    fs::copy(b_, out, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return out;
  }

  std::string first_shard(const std::string& model) {
    const Checkpoint ckpt = Checkpoint::open(model);
    return ckpt.files().front().path();
  }

  TempDir dir_;
  std::string a_;
  std::string b_;
  LiveModel live_;
  Snapshot before_;
  std::vector<const std::byte*> where_;
};

TEST_F(UpdateFailure, MissingCheckpoint) {
  const std::string message = expect_failure(dir_.file("no-such-model"), ErrorKind::kIo);
  EXPECT_NE(message.find("no-such-model"), std::string::npos) << message;
}

TEST_F(UpdateFailure, MissingShardFile) {
  const std::string copy = copy_of_b();
  fs::remove(first_shard(copy));
  expect_failure(copy, ErrorKind::kIndex);
}

TEST_F(UpdateFailure, TruncatedShard) {
  const std::string copy = copy_of_b();
  const std::string shard = first_shard(copy);
  fs::resize_file(shard, fs::file_size(shard) - 100);
  const std::string message = expect_failure(copy, ErrorKind::kFileSize);
  EXPECT_NE(message.find(shard), std::string::npos) << message;
}

TEST_F(UpdateFailure, CorruptHeader) {
  const std::string copy = copy_of_b();
  const std::string shard = first_shard(copy);
  std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(8);
  file.write("}", 1);  // the header JSON no longer parses
  file.close();
  expect_failure(copy, ErrorKind::kHeaderJson);
}

TEST_F(UpdateFailure, ShapeMismatch) {
  // Twice the experts: every expert tensor of the live layout has another shape.
  const std::string other = make_model(dir_, "qwen3_moe", 2, "fp8", "", 16);
  const std::string message = expect_failure(other, ErrorKind::kConflict);
  EXPECT_NE(message.find("expected"), std::string::npos) << message;
}

TEST_F(UpdateFailure, DtypeMismatch) {
  // A bf16 checkpoint cannot update FP8 weights in place: F8_E4M3 tensors would need new scales.
  const std::string bf16 = make_model(dir_, "qwen3_moe", 2);
  const std::string message = expect_failure(bf16, ErrorKind::kConflict);
  EXPECT_NE(message.find("quantization"), std::string::npos) << message;
}

TEST_F(UpdateFailure, IoErrorAfterDataWasStaged) {
  fault::configure("read_error_after:" +
                   std::to_string(data_bytes(b_) / 2));  // header reads count too
  const std::string message = expect_failure(b_, ErrorKind::kIo);
  EXPECT_NE(message.find("injected"), std::string::npos) << message;
}

TEST_F(UpdateFailure, FileChangedUnderTheReader) {
  const std::string copy = copy_of_b();
  const std::string shard = first_shard(copy);
  fault::after_bytes_read(data_bytes(copy) / 2, [shard] {
    // Rewrite the last byte in place (same size): the reader's snapshot is no longer one version.
    const int fd = ::open(shard.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const off_t end = static_cast<off_t>(fs::file_size(shard));
    char byte = 0x11;
    ASSERT_EQ(::pwrite(fd, &byte, 1, end - 1), 1);
    struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    futimens(fd, times);
    ::close(fd);
  });
  const std::string message = expect_failure(copy, ErrorKind::kConflict);
  EXPECT_NE(message.find("changed while it was being read"), std::string::npos) << message;
}

TEST_F(UpdateFailure, FileReplacedUnderTheReader) {
  const std::string copy = copy_of_b();
  const std::string shard = first_shard(copy);
  fault::after_bytes_read(data_bytes(copy) / 2, [shard] {
    fs::copy_file(shard, shard + ".new");
    fs::rename(shard + ".new", shard);
  });
  expect_failure(copy, ErrorKind::kConflict);
}

TEST_F(UpdateFailure, Cancelled) {
  std::atomic<bool> cancel{false};
  fault::after_bytes_read(data_bytes(b_) / 2, [&] { cancel = true; });
  UpdateOptions options;
  options.cancel = &cancel;
  expect_failure(b_, ErrorKind::kCancelled, {}, options);
}

TEST_F(UpdateFailure, BadScaleFoundByPostProcessing) {
  const std::string copy = copy_of_b();
  const std::string name = "model.layers.1.mlp.experts.0.up_proj.weight_scale";
  const std::string file = poke_float(copy, name, 0, 0.0f);
  const std::string message = expect_failure(copy, ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("scale"), std::string::npos) << message;
  // What a user can look up (file, checkpoint tensor, expert), not the internal per-part table.
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("expert 0 "), std::string::npos) << message;
  EXPECT_EQ(message.find("_parts"), std::string::npos) << message;
}

TEST_F(UpdateFailure, BadInputScaleNamesItsTensorAndExpert) {
  const std::string copy = copy_of_b();
  const std::string name = "model.layers.2.mlp.experts.5.down_proj.input_scale";
  const std::string file = poke_float(copy, name, 0, -1.0f);
  const std::string message = expect_failure(copy, ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("expert 5 "), std::string::npos) << message;
  EXPECT_EQ(message.find("_parts"), std::string::npos) << message;
}

// Block FP8 keeps the checkpoint's weight_scale_inv grids, and checks every block all the same: a
// NaN, zero or negative block scale fails the update before its commit, naming file, tensor and
// block.
TEST(UpdateBlockScale, BadBlockScaleFailsBeforeTheCommit) {
  TempDir dir;
  const std::string a = make_model(dir, "qwen3_moe", 1, "fp8-block");
  const std::string b = make_model(dir, "qwen3_moe", 2, "fp8-block");
  LiveModel live = load_live(a, layout(2, 2));
  const Snapshot before = snapshot(live);
  // up_proj [512, 256] has a [4, 2] grid; block (row 3, column 1) is element 7. Expert 2 sits in
  // slot 0 of EP rank 1.
  const std::string name = "model.layers.1.mlp.experts.2.up_proj.weight_scale_inv";
  int copies = 0;
  for (const float bad : {std::nanf(""), 0.0f, -0.5f}) {
    const std::string copy = dir.file("b-" + std::to_string(copies++));
    std::filesystem::copy(b, copy, std::filesystem::copy_options::recursive);
    const std::string file = poke_float(copy, name, 7, bad);
    for (const WeightFilter& filter :
         {WeightFilter{}, WeightFilter{.substrings = {"mlp.experts.2."}}}) {
      try {
        update_weights(live, copy, filter);
        ADD_FAILURE() << "the update succeeded with a block scale of " << bad;
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << message;
        EXPECT_EQ(e.file(), file) << message;
        EXPECT_EQ(e.tensor(), name) << message;
        EXPECT_NE(message.find("block (row 3, column 1)"), std::string::npos) << message;
        EXPECT_NE(message.find("expert 2 "), std::string::npos) << message;
      }
      expect_unchanged(before, live);
      EXPECT_EQ(live.version, 0u);
      EXPECT_EQ(live.model_path, a);
    }
  }
  // Attention's grids too ([hidden / 128, heads x head_dim / 128] for o_proj).
  const std::string copy = dir.file("b-attention");
  std::filesystem::copy(b, copy, std::filesystem::copy_options::recursive);
  poke_float(copy, "model.layers.0.self_attn.o_proj.weight_scale_inv", 1, 0.0f);
  try {
    update_weights(live, copy, {.substrings = {"self_attn"}});
    ADD_FAILURE() << "the update succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.tensor(), "model.layers.0.self_attn.o_proj.weight_scale_inv") << e.what();
    EXPECT_NE(std::string(e.what()).find("block (row 0, column 1)"), std::string::npos) << e.what();
  }
  expect_unchanged(before, live);
  EXPECT_EQ(live.version, 0u);
}

TEST_F(UpdateFailure, FilterSelectingNothing) {
  expect_failure(b_, ErrorKind::kTensorNotFound, {.substrings = {"no.such.tensor"}});
}

TEST_F(UpdateFailure, ModuleLargerThanTheStagingBound) {
  UpdateOptions options;
  options.staging_bytes = 1024;
  const std::string message = expect_failure(b_, ErrorKind::kInvalidArgument, {}, options);
  EXPECT_NE(message.find("staging"), std::string::npos) << message;
}

TEST_F(UpdateFailure, BetweenGroupsTheErrorSaysWhatWasCommitted) {
  const uint64_t bytes = data_bytes(b_);
  UpdateOptions options;
  options.staging_bytes = 256 << 10;
  int commits = 0;
  options.end_commit = [&] { ++commits; };
  fault::configure("read_error_after:" + std::to_string(bytes / 2));
  try {
    update_weights(live_, b_, {}, options);
    FAIL() << "the update succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("commit groups: those groups hold the new weights"),
              std::string::npos)
        << e.what();
  }
  fault::configure("");
  EXPECT_GT(commits, 0);
  EXPECT_EQ(live_.version, 1u);  // the bytes changed: readers comparing versions see it
  EXPECT_EQ(addresses(live_), where_);
  // Each rank tensor is either wholly old or wholly new (groups are whole modules).
  const Snapshot new_bytes = snapshot(load_live(b_, layout(2, 2)));
  size_t fresh = 0;
  for (size_t r = 0; r < live_.ranks.size(); ++r) {
    for (const PlanParam& p : live_.plan.ranks[r].params) {
      const bool is_new = param_equals(new_bytes, r, p, live_);
      EXPECT_TRUE(is_new || param_equals(before_, r, p, live_)) << p.name;
      fresh += is_new && !param_equals(before_, r, p, live_) ? 1 : 0;
    }
  }
  EXPECT_GT(fresh, 0u);
}

}  // namespace
}  // namespace shardload
