// A --keep restart reuses the shared memory only when the bytes in it are the checkpoint's as it is
// now: the manifest records, at the load and at every update, the path with its links resolved and
// each file's identity (device, inode, size, modification time, header hash). An RL loop's
// `latest -> step-N` link moved between two runs, or a trainer rewriting `latest/` in place, makes
// the restart reload and say why. And a load writes every word of a rank file's header, whatever the
// file it reuses held (a double-buffered server's active slot).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

namespace fs = std::filesystem;

class RestartIdentityTest : public TwoModelsTest<61, 62> {
 protected:
  static std::vector<std::string> args(const std::string& model, const std::string& name,
                                       const std::vector<std::string>& more = {"--keep"}) {
    return serve_args(model, name, more);
  }

  // Serves MODEL under NAME with --keep until it listens; returns what it printed by then, stopped.
  static std::string keep_run(const std::string& model, const std::string& name, Checksums* served = nullptr) {
    ServerProcess server(args(model, name));
    const int port = server.wait_for_port();
    EXPECT_GT(port, 0);
    if (port > 0 && served != nullptr) *served = endpoint_checksums(port);
    const std::string out = server.out();
    stop(server);
    return out;
  }

  // A copy of MODEL's files in DIR/NAME (a checkpoint directory a trainer owns).
  static std::string copy_model(const TempDir& dir, const std::string& model, const std::string& name) {
    const std::string out = dir.file(name);
    fs::create_directories(out);
    for (const auto& entry : fs::directory_iterator(model)) fs::copy_file(entry.path(), fs::path(out) / entry.path().filename());
    return out;
  }

  // Rewrites FILE in place with the bytes of SOURCE: the same inode, as `cp` over it or a trainer
  // writing into an open file does.
  static void rewrite_in_place(const std::string& file, const std::string& source) {
    const std::string bytes = read_file(source);
    const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0) << file;
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
};

// ln -sfn m1 cur; serve cur --keep; stop; ln -sfn m2 cur; serve cur --keep: m2's bytes, and why.
TEST_F(RestartIdentityTest, AKeepRestartThroughAMovedLinkReloadsTheNewTarget) {
  const std::string name = unique_name("link");
  const ShmCleanup cleanup(name);
  const TempDir dir;
  const std::string latest = dir.file("latest");
  fs::create_directory_symlink(first_, latest);
  Checksums served;
  keep_run(latest, name, &served);
  EXPECT_EQ(served, expected_checksums(first_, layout(2, 2)));

  fs::remove(latest);
  fs::create_directory_symlink(second_, latest);
  const std::string out = keep_run(latest, name, &served);
  EXPECT_NE(out.find("reloading: the checkpoint is not the one the live bytes were read from: the model "
                     "path now resolves to " + fs::canonical(second_).string()),
            std::string::npos)
      << out;
  EXPECT_EQ(served, expected_checksums(second_, layout(2, 2)));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(second_, layout(2, 2)));

  // Nothing moved since: the kept bytes are the checkpoint's, and they are reused.
  const std::string again = keep_run(latest, name, &served);
  EXPECT_NE(again.find("reusing"), std::string::npos) << again;
  EXPECT_EQ(served, expected_checksums(second_, layout(2, 2)));
}

// The checkpoint's files rewritten in place between two runs (same names, same inodes).
TEST_F(RestartIdentityTest, FilesRewrittenInPlaceAreReloaded) {
  const std::string name = unique_name("inplace");
  const ShmCleanup cleanup(name);
  const TempDir dir;
  const std::string latest = copy_model(dir, first_, "latest");
  keep_run(latest, name);
  for (const auto& entry : fs::directory_iterator(latest)) {
    if (entry.path().extension() == ".safetensors") {
      rewrite_in_place(entry.path(), (fs::path(second_) / entry.path().filename()).string());
    }
  }
  Checksums served;
  const std::string out = keep_run(latest, name, &served);
  EXPECT_NE(out.find("reloading: the checkpoint is not the one the live bytes were read from: "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("was modified since it was read"), std::string::npos) << out;
  EXPECT_EQ(served, expected_checksums(second_, layout(2, 2)));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(second_, layout(2, 2)));
}

// An update records where its bytes came from too: a link moved after an update (the manifest names
// the link) is a reload at the next start.
TEST_F(RestartIdentityTest, AnUpdateRecordsTheFilesItRead) {
  const std::string name = unique_name("update");
  const ShmCleanup cleanup(name);
  const TempDir dir;
  const std::string latest = dir.file("latest");
  fs::create_directory_symlink(first_, latest);
  {
    ServerProcess server(args(second_, name));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", latest}});
    ASSERT_EQ(reply.status, 200) << reply.text;
    stop(server);
  }
  const nlohmann::json sources = read_manifest(cleanup.dir())["sources"];
  ASSERT_EQ(sources.size(), 1u) << sources.dump();
  EXPECT_EQ(sources[0]["resolved_path"], fs::canonical(first_).string());
  EXPECT_TRUE(sources[0]["files"].contains("model-00001-of-00003.safetensors")) << sources.dump();

  fs::remove(latest);
  fs::create_directory_symlink(second_, latest);
  Checksums served;
  const std::string out = keep_run(latest, name, &served);
  EXPECT_NE(out.find("reloading: "), std::string::npos) << out;
  EXPECT_EQ(served, expected_checksums(second_, layout(2, 2)));
}

// A ModelOpt checkpoint may keep its quantization settings in hf_quant_config.json rather than in
// config.json: an edit to either file between two runs is a reload that names both, and unchanged
// files are reused.
TEST(RestartConfigIdentity, AnEditedConfigOrHfQuantConfigJsonIsAReload) {
  const TempDir dir;
  TinyOptions options;
  options.arch = "llama";
  options.quant = "modelopt-nvfp4";
  options.out = dir.file("modelopt");
  make_tiny(options);
  // The older ModelOpt spelling: config.json without a quantization_config, hf_quant_config.json beside it.
  const std::string config_path = options.out + "/config.json";
  const std::string quant_path = options.out + "/hf_quant_config.json";
  nlohmann::json config = nlohmann::json::parse(read_file(config_path));
  const nlohmann::json q = config["quantization_config"];
  config.erase("quantization_config");
  const auto write_json = [](const std::string& path, const nlohmann::json& value) {
    std::ofstream(path, std::ios::trunc) << value.dump(2);
  };
  write_json(config_path, config);
  nlohmann::json hf_quant = {{"producer", q["producer"]},
                             {"quantization",
                              {{"quant_algo", "NVFP4"},
                               {"kv_cache_quant_algo", nullptr},
                               {"group_size", 16},
                               {"exclude_modules", q["ignore"]}}}};
  write_json(quant_path, hf_quant);

  const std::string name = unique_name("hfquant");
  const ShmCleanup cleanup(name);
  const auto keep_run = [&](Checksums* served = nullptr) {
    ServerProcess server(serve_args(options.out, name, {"--keep"}, 2, 1));
    const int port = server.wait_for_port();
    EXPECT_GT(port, 0) << server.output();
    if (port > 0 && served != nullptr) *served = endpoint_checksums(port);
    const std::string out = server.out();
    stop(server);
    return out;
  };
  Checksums served;
  keep_run(&served);
  const Checksums expected = expected_checksums(options.out, layout(2, 1));
  EXPECT_EQ(served, expected);
  const std::string unchanged = keep_run();
  EXPECT_NE(unchanged.find("reusing"), std::string::npos) << unchanged;

  hf_quant["producer"]["version"] = "0.47.0";
  write_json(quant_path, hf_quant);
  const std::string after_quant_edit = keep_run(&served);
  EXPECT_NE(after_quant_edit.find("reloading: the checkpoint is not the one the live bytes were read from: "
                                  "config.json or hf_quant_config.json changed"),
            std::string::npos)
      << after_quant_edit;
  EXPECT_EQ(served, expected);

  config["_name_or_path"] = "edited";
  write_json(config_path, config);
  const std::string after_config_edit = keep_run();
  EXPECT_NE(after_config_edit.find("config.json or hf_quant_config.json changed"), std::string::npos)
      << after_config_edit;
  const std::string again = keep_run();
  EXPECT_NE(again.find("reusing"), std::string::npos) << again;
}

// A double-buffered server leaves its rank files with slot 1 active; a single-buffered server whose
// rank files have exactly that size loads into them in place. Its readers (layout.md: the active
// slot word is 0 in a single-buffered file) must find the new bytes at the manifest's offsets.
TEST(StaleHeaderWords, ASingleBufferedLoadInPlaceClearsTheActiveSlotWord) {
  const TempDir dir;
  const auto tiny = [&](const std::string& arch, int layers, uint64_t seed) {
    TinyOptions options;
    options.arch = arch;
    options.layers = layers;
    options.seed = seed;
    options.out = dir.file(arch + std::to_string(seed));
    make_tiny(options);
    return options.out;
  };
  const std::string doubled = tiny("llama", 2, 4);
  const std::string other = tiny("llama", 2, 6);
  const std::string single = tiny("qwen3", 5, 1);
  const std::string name = unique_name("slotword");
  const ShmCleanup cleanup(name);
  {
    ServerProcess server(serve_args(doubled, name, {"--double-buffer", "--keep", "--dtype", "float32"}, 2, 1));
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0);
    ASSERT_EQ(post(port, "/update_weights_from_disk", {{"model_path", other}}).status, 200);
    stop(server);
  }
  const uint64_t double_bytes = fs::file_size(cleanup.dir() + "/rank-0.bin");
  {
    const MappedRankFile file(cleanup.dir() + "/rank-0.bin");
    ASSERT_NE(file.active_slot(), 0u) << "the update did not leave slot 1 active";
  }
  ServerProcess server(serve_args(single, name, {"--dtype", "float32"}, 2, 1));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  // The repro's premise: the single-buffered rank file is exactly two of the slots, loaded in place.
  ASSERT_EQ(fs::file_size(cleanup.dir() + "/rank-0.bin"), double_bytes);
  ParallelConfig parallel = layout(2, 1);
  parallel.dtype = DType::kF32;
  for (const char* rank : {"/rank-0.bin", "/rank-1.bin"}) {
    const MappedRankFile file(cleanup.dir() + rank);
    EXPECT_EQ(file.active_slot(), 0u) << rank;
  }
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(single, parallel));
  stop(server);
}

// Restarting a double-buffered server says why it loads (not the format of what it left).
TEST_F(RestartIdentityTest, ADoubleBufferedRestartSaysItLoadsAtEachStart) {
  const std::string name = unique_name("dbrestart");
  const ShmCleanup cleanup(name);
  for (int run = 0; run < 2; ++run) {
    ServerProcess server(args(first_, name, {"--double-buffer", "--keep"}));
    ASSERT_GT(server.wait_for_port(), 0);
    if (run == 1) {
      EXPECT_NE(server.out().find("reloading: a double-buffered server loads at each start"), std::string::npos)
          << server.output();
    }
    stop(server);
  }
}

}  // namespace
}  // namespace shardload::testing
