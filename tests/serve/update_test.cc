// The weight server end to end: a real `shardload serve` child, its shared memory mapped from this
// process, updates posted over loopback HTTP. The new values must show up in the mapped bytes, and
// a request that fails must leave every byte, the version and the sequence words as they were.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class ServeUpdateTest : public TwoModelsTest<1, 2> {
 protected:
  static void SetUpTestSuite() {
    TwoModelsTest::SetUpTestSuite();
    first_sums_ = new Checksums(expected_checksums(first_, layout(2, 2)));
    second_sums_ = new Checksums(expected_checksums(second_, layout(2, 2)));
  }
  static void TearDownTestSuite() {
    delete first_sums_;
    delete second_sums_;
    TwoModelsTest::TearDownTestSuite();
  }

  // A server on the first model, tp=2 ep=2, on a free port.
  void start(const std::string& test, std::vector<std::string> more = {}) {
    name_ = unique_name(test);
    cleanup_ = std::make_unique<ShmCleanup>(name_);
    server_ = std::make_unique<ServerProcess>(serve_args(first_, name_, more));
    port_ = server_->wait_for_port();
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    if (server_) stop(*server_);
  }

  const std::string& dir() const { return cleanup_->dir(); }

  static Checksums* first_sums_;
  static Checksums* second_sums_;
  std::string name_;
  std::unique_ptr<ShmCleanup> cleanup_;
  std::unique_ptr<ServerProcess> server_;
  int port_ = -1;
};

Checksums* ServeUpdateTest::first_sums_ = nullptr;
Checksums* ServeUpdateTest::second_sums_ = nullptr;

TEST_F(ServeUpdateTest, SharedMemoryFollowsTheLayoutContract) {
  ASSERT_NO_FATAL_FAILURE(start("layout"));
  const nlohmann::json manifest = read_manifest(dir());
  EXPECT_EQ(manifest["format"], "shardload-shm/1");
  EXPECT_EQ(manifest["name"], name_);
  EXPECT_EQ(manifest["version"], 0);
  EXPECT_EQ(manifest["tp_size"], 2);
  EXPECT_EQ(manifest["ep_size"], 2);
  EXPECT_EQ(manifest["physical_to_logical_map"].size(), 3u);  // MoE layers 1-3
  ASSERT_EQ(manifest["ranks"].size(), 2u);
  for (const nlohmann::json& rank : manifest["ranks"]) {
    const MappedRankFile file(dir() + "/" + rank["file"].get<std::string>());
    EXPECT_EQ(file.magic(), "SHLDSHM1");
    EXPECT_EQ(file.sequence() % 2, 0u);
    EXPECT_EQ(file.size(), rank["bytes"].get<uint64_t>());
    for (const auto& [name, tensor] : rank["tensors"].items()) {
      EXPECT_GE(tensor["offset"].get<uint64_t>(), kShmHeaderBytes) << name;
      EXPECT_EQ(tensor["offset"].get<uint64_t>() % 256, 0u) << name;
      EXPECT_LE(tensor["offset"].get<uint64_t>() + tensor["nbytes"].get<uint64_t>(), file.size())
          << name;
    }
  }
  // The bytes are the model's, whether read through the mapping or asked of the server.
  EXPECT_EQ(mapped_checksums(dir()), *first_sums_);
  EXPECT_EQ(endpoint_checksums(port_), *first_sums_);

  const HttpReply health = get(port_, "/health");
  EXPECT_EQ(health.status, 200);
  const HttpReply info = get(port_, "/get_model_info");
  ASSERT_EQ(info.status, 200) << info.text;
  EXPECT_EQ(info.body["architecture"], "Qwen3MoeForCausalLM");
  EXPECT_EQ(info.body["tp_size"], 2);
  EXPECT_EQ(info.body["ep_size"], 2);
  EXPECT_EQ(info.body["dtype"], "BF16");
  EXPECT_EQ(info.body["quantization"], "none");
  EXPECT_EQ(info.body["version"], 0);
  EXPECT_EQ(std::filesystem::path(info.body["model_path"].get<std::string>()),
            std::filesystem::absolute(first_));
}

TEST_F(ServeUpdateTest, UpdateFromASecondCheckpointIsSeenInTheMappedMemory) {
  ASSERT_NO_FATAL_FAILURE(start("full"));
  // Mapped before the update, as a reader process would keep it: the same pages change under it.
  const MappedRankFile rank0(dir() + "/rank-0.bin");
  const nlohmann::json tensors = read_manifest(dir())["ranks"][0]["tensors"];
  const uint64_t sequence_before = rank0.sequence();

  const HttpReply reply = post(port_, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["success"], true);
  EXPECT_EQ(reply.body["version"], 1);
  EXPECT_EQ(reply.body["num_updated_tensors"], first_sums_->size());

  EXPECT_EQ(mapped_checksums(dir()), *second_sums_);
  EXPECT_EQ(endpoint_checksums(port_), *second_sums_);
  for (const auto& [name, tensor] : tensors.items()) {
    EXPECT_EQ(xxh3_hex(rank0.bytes(tensor["offset"], tensor["nbytes"])),
              second_sums_->at(checksum_key(0, name)))
        << name;
  }
  // One commit: the word went odd and back, +2.
  EXPECT_EQ(rank0.sequence(), sequence_before + 2);
  EXPECT_EQ(served_version(port_), 1u);
  const nlohmann::json manifest = read_manifest(dir());
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(std::filesystem::path(manifest["model_path"].get<std::string>()),
            std::filesystem::path(second_));
  EXPECT_EQ(manifest["ranks"][0]["tensors"], tensors);  // offsets never change
}

TEST_F(ServeUpdateTest, FilteredUpdateChangesOnlyExpertTensors) {
  ASSERT_NO_FATAL_FAILURE(start("filtered"));
  const HttpReply reply = post(
      port_, "/update_weights_from_disk",
      {{"model_path", second_}, {"weight_name_filter", {"mlp.experts"}}, {"load_format", "auto"}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 1);

  Checksums expected;
  uint64_t expert_tensors = 0;
  for (const auto& [key, hash] : *first_sums_) {
    const bool expert = key.find("mlp.experts") != std::string::npos;
    expert_tensors += expert ? 1 : 0;
    expected[key] = expert ? second_sums_->at(key) : hash;
  }
  ASSERT_GT(expert_tensors, 0u);
  EXPECT_EQ(reply.body["num_updated_tensors"], expert_tensors);
  EXPECT_EQ(mapped_checksums(dir()), expected);
  EXPECT_EQ(endpoint_checksums(port_), expected);
}

TEST_F(ServeUpdateTest, MalformedRequestsAreRejectedAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(start("malformed"));
  const MappedRankFile rank0(dir() + "/rank-0.bin");
  const uint64_t sequence = rank0.sequence();
  const std::string manifest_text = read_file(dir() + "/manifest.json");
  const std::vector<std::string> bodies = {
      "{\"model_path\": ",                                                       // cut short
      "not json at all",                                                         //
      "[1, 2, 3]",                                                               // not an object
      "{}",                                                                      // no model_path
      "{\"model_path\": 42}",                                                    // wrong type
      "{\"model_path\": \"\"}",                                                  // empty
      "{\"model_path\": \"" + second_ + "\", \"weight_name_filter\": \"mlp\"}",  // not a list
      "{\"model_path\": \"" + second_ + "\", \"weight_name_filter\": [1]}",
      "{\"model_path\": \"" + second_ + "\", \"weight_name_filter\": []}",
      "{\"model_path\": \"" + second_ + "\", \"load_format\": \"pt\"}",
      "{\"model_path\": \"" + second_ + "\", \"load_format\": 3}",
  };
  for (const std::string& body : bodies) {
    const HttpReply reply = post(port_, "/update_weights_from_disk", body);
    EXPECT_EQ(reply.status, 400) << body << " -> " << reply.text;
    EXPECT_EQ(reply.body["success"], false) << body;
    EXPECT_FALSE(reply.body.value("message", "").empty()) << body;
    EXPECT_EQ(reply.body["version"], 0) << body;
  }
  const std::vector<std::string> rebalances = {
      "{\"physical_to_logical_map\": ",
      "{}",
      "{\"physical_to_logical_map\": [[0]], \"expert_load\": [[1]]}",
      "{\"physical_to_logical_map\": \"x\"}",
      "{\"physical_to_logical_map\": [[0, -1]]}",
      "{\"physical_to_logical_map\": [[0.5]]}",
      "{\"expert_load\": [[\"a\"]]}",
  };
  for (const std::string& body : rebalances) {
    const HttpReply reply = post(port_, "/rebalance", body);
    EXPECT_EQ(reply.status, 400) << body << " -> " << reply.text;
    EXPECT_EQ(reply.body["success"], false) << body;
    EXPECT_FALSE(reply.body.value("message", "").empty()) << body;
  }
  EXPECT_EQ(rank0.sequence(), sequence);
  EXPECT_EQ(read_file(dir() + "/manifest.json"), manifest_text);
  EXPECT_EQ(served_version(port_), 0u);
  EXPECT_EQ(mapped_checksums(dir()), *first_sums_);
  EXPECT_EQ(endpoint_checksums(port_), *first_sums_);
}

TEST_F(ServeUpdateTest, UnknownModelPathFailsWithoutChange) {
  ASSERT_NO_FATAL_FAILURE(start("unknown"));
  const MappedRankFile rank0(dir() + "/rank-0.bin");
  const uint64_t sequence = rank0.sequence();
  const HttpReply reply =
      post(port_, "/update_weights_from_disk", {{"model_path", models_->file("no-such-model")}});
  EXPECT_EQ(reply.status, 400) << reply.text;
  EXPECT_EQ(reply.body["success"], false);
  EXPECT_NE(reply.body.value("message", "").find("no-such-model"), std::string::npos) << reply.text;
  EXPECT_EQ(reply.body["version"], 0);
  EXPECT_EQ(rank0.sequence(), sequence);
  EXPECT_EQ(served_version(port_), 0u);
  EXPECT_EQ(read_manifest(dir())["version"], 0);
  EXPECT_EQ(read_manifest(dir())["update_in_progress"], false);
  EXPECT_EQ(mapped_checksums(dir()), *first_sums_);
  EXPECT_EQ(endpoint_checksums(port_), *first_sums_);

  // The server still updates afterwards.
  const HttpReply good = post(port_, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(good.status, 200) << good.text;
  EXPECT_EQ(good.body["version"], 1);
  EXPECT_EQ(mapped_checksums(dir()), *second_sums_);
}

// With a staging bound the update commits in module groups; each group is a seqlock commit of its
// own.
TEST_F(ServeUpdateTest, BoundedStagingCommitsInGroupsEachMovingTheWordByTwo) {
  ASSERT_NO_FATAL_FAILURE(start("groups", {"--staging-bytes", "256K"}));
  const MappedRankFile rank0(dir() + "/rank-0.bin");
  const uint64_t before = rank0.sequence();
  const HttpReply reply = post(port_, "/update_weights_from_disk", {{"model_path", second_}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body["version"], 1);
  const uint64_t after = rank0.sequence();
  EXPECT_EQ(after % 2, 0u);
  EXPECT_GE(after - before, 4u) << "one commit group for 2.6 MB staged 256 KiB at a time";
  EXPECT_EQ(mapped_checksums(dir()), *second_sums_);
}

// A reader following the seqlock protocol sees, for each rank file, all old or all new tensors,
// however its reads fall against the commits of updates that flip between two checkpoints.
TEST_F(ServeUpdateTest, SeqlockReadersNeverSeeAMixOfOldAndNew) {
  ASSERT_NO_FATAL_FAILURE(start("readers"));
  auto rank_part = [](const Checksums& all, int rank) {
    Checksums out;
    const std::string prefix = checksum_key(rank, "");
    for (const auto& [key, hash] : all) {
      if (key.starts_with(prefix)) out[key] = hash;
    }
    return out;
  };
  std::atomic<bool> writing{true};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (writing || reads < 3) {
      const Checksums seen = mapped_checksums(dir());
      for (int r = 0; r < 2; ++r) {
        const Checksums part = rank_part(seen, r);
        EXPECT_TRUE(part == rank_part(*first_sums_, r) || part == rank_part(*second_sums_, r))
            << "rank " << r << " mixes old and new tensors";
      }
      ++reads;
    }
  });
  for (int i = 0; i < 6; ++i) {
    const std::string& model = i % 2 == 0 ? second_ : first_;
    EXPECT_EQ(post(port_, "/update_weights_from_disk", {{"model_path", model}}).status, 200);
  }
  writing = false;
  reader.join();
  EXPECT_EQ(served_version(port_), 6u);
  EXPECT_EQ(mapped_checksums(dir()), *first_sums_);
}

}  // namespace
}  // namespace shardload::testing
