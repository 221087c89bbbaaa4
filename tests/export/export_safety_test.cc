// Exports that must not be written where they would be taken for the checkpoint, never show up
// half-written, and are read back only when their manifest, their rank files and what the caller
// asks all agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "error_kind.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/tiny.h"
#include "shardload_bin.h"
#include "temp_dir.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::read_file;
using ::shardload::testing::run_command;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

std::string tiny(const TempDir& dir, const std::string& arch = "qwen3_moe") {
  return ::shardload::testing::make_tiny_model(dir, arch, 4);
}

struct Loaded {
  Plan plan;
  std::vector<RankWeights> ranks;
};

Loaded load(const Checkpoint& ckpt, int tp, int ep) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  Loaded out{make_plan(ckpt, parallel), {}};
  out.ranks = load_ranks(ckpt, out.plan);
  return out;
}

// Every entry under a directory, with its size: what "nothing changed" is checked against.
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    out.insert(fs::relative(entry.path(), dir).string() + " " +
               (entry.is_regular_file() ? std::to_string(entry.file_size()) : "dir"));
  }
  return out;
}

// Makes writing the last rank fail: a tensor name the safetensors writer refuses (after the earlier
// ranks' files were written).
void break_last_rank(Plan& plan) {
  for (PlanParam& param : plan.ranks.back().params) {
    if (param.exported()) {
      param.name = "__metadata__";
      return;
    }
  }
}

using ::shardload::testing::kind_of;

// --out equal to the model directory, inside it, reached through a symlink, or holding the model:
// refused before anything is written, and the checkpoint still opens as the checkpoint it was.
TEST(ExportTarget, RefusesTheModelDirectoryAndAnythingAroundIt) {
  TempDir dir;
  const std::string model = tiny(dir);
  const Checkpoint ckpt = Checkpoint::open(model);
  const Loaded loaded = load(ckpt, 2, 1);
  fs::create_directory_symlink(model, dir.file("link"));
  const std::set<std::string> before = listing(dir.path());
  for (const std::string& out : {model, model + "/", model + "/sub", model + "/sub/deeper",
                                 dir.file("link"), dir.file("link/sub"), dir.file("model/../model"),
                                 dir.path().string(), dir.file("link/..")}) {
    std::string message;
    EXPECT_EQ(kind_of([&] { check_export_target(model, {.out = out}); }),
              ErrorKind::kInvalidArgument)
        << out;
    EXPECT_EQ(
        kind_of(
            [&] { export_ranks(ckpt, loaded.plan, loaded.ranks, {.out = out, .overwrite = true}); },
            &message),
        ErrorKind::kInvalidArgument)
        << out;
    EXPECT_NE(message.find("--out"), std::string::npos) << message;
    EXPECT_EQ(listing(dir.path()), before) << out << ": something was written";
  }
  EXPECT_FALSE(is_export_dir(model));
  EXPECT_EQ(Checkpoint::open(model).tensor_names(), ckpt.tensor_names());
  // A sibling whose name starts with the model's is not inside it.
  EXPECT_NO_THROW(check_export_target(model, {.out = dir.file("model2")}));
}

// An export that fails part-way (here: a rank tensor the file writer refuses, after the earlier
// ranks' files were written) leaves no --out, nothing that looks like an export, and no temporary
// directory.
TEST(ExportTarget, AFailedExportLeavesNothingBehind) {
  TempDir dir;
  const std::string model = tiny(dir);
  const Checkpoint ckpt = Checkpoint::open(model);
  Loaded loaded = load(ckpt, 2, 1);
  break_last_rank(loaded.plan);
  fs::create_directory(dir.file("exports"));
  const std::string out = dir.file("exports/tp2");
  EXPECT_THROW(export_ranks(ckpt, loaded.plan, loaded.ranks, {.out = out}), Error);
  EXPECT_TRUE(fs::is_empty(dir.file("exports")))
      << "a temporary directory or a partial export was left";
}

// With --overwrite the old export stays whole until the new one is complete: a failed replacement
// leaves the old one loadable as it was; a good one replaces it and keeps the files a user put
// beside it.
TEST(ExportTarget, OverwriteReplacesTheOldExportOnlyOnceTheNewOneIsComplete) {
  TempDir dir;
  const std::string model = tiny(dir);
  const Checkpoint ckpt = Checkpoint::open(model);
  const std::string out = dir.file("out");
  const Loaded tp4 = load(ckpt, 4, 2);
  export_ranks(ckpt, tp4.plan, tp4.ranks, {.out = out});
  write_file(dir.file("out/NOTES.md"), "mine");
  const std::set<std::string> before = listing(dir.path());

  Loaded broken = load(ckpt, 2, 1);
  break_last_rank(broken.plan);
  EXPECT_THROW(export_ranks(ckpt, broken.plan, broken.ranks, {.out = out, .overwrite = true}),
               Error);
  EXPECT_EQ(listing(dir.path()), before);
  EXPECT_EQ(load_export(out).ranks.size(), 4u);

  const Loaded tp2 = load(ckpt, 2, 1);
  export_ranks(ckpt, tp2.plan, tp2.ranks, {.out = out, .overwrite = true});
  EXPECT_EQ(load_export(out).ranks.size(), 2u);
  EXPECT_FALSE(fs::exists(dir.file("out/model-rank-3-part-0.safetensors")));
  EXPECT_EQ(read_file(dir.file("out/NOTES.md")), "mine");
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2u) << "model and out only: no temporary or retired directory";
}

// A tmpfs mounted on a directory for the life of the object (tests run as root in CI); mounted()
// is false where mounting is not allowed.
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::string& dir) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ =
        run_command({"/bin/mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir}).exit_code == 0;
  }
  ~TmpfsMount() {
    if (mounted_) run_command({"/bin/umount", dir_});
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

// A mount point given as --out (a volume) cannot be renamed over: the export is staged inside it
// and moved up with the manifest last; a failed export still leaves the earlier one as it was.
TEST(ExportTarget, AMountPointAsOutIsFilledInPlace) {
  TempDir dir;
  const std::string model = tiny(dir);
  const std::string out = dir.file("volume");
  const TmpfsMount mount(out);
  if (!mount.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  const Checkpoint ckpt = Checkpoint::open(model);
  const Loaded tp2 = load(ckpt, 2, 1);
  export_ranks(ckpt, tp2.plan, tp2.ranks, {.out = out});
  EXPECT_EQ(load_export(out).ranks.size(), 2u);
  write_file(out + "/NOTES.md", "mine");
  const std::set<std::string> before = listing(out);

  Loaded broken = load(ckpt, 4, 2);
  break_last_rank(broken.plan);
  EXPECT_THROW(export_ranks(ckpt, broken.plan, broken.ranks, {.out = out, .overwrite = true}),
               Error);
  EXPECT_EQ(listing(out), before);

  const Loaded tp4 = load(ckpt, 4, 2);
  export_ranks(ckpt, tp4.plan, tp4.ranks, {.out = out, .overwrite = true});
  EXPECT_EQ(load_export(out).ranks.size(), 4u);
  EXPECT_EQ(read_file(out + "/NOTES.md"), "mine");
  for (const fs::directory_entry& entry : fs::directory_iterator(out)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".shardload")) << entry.path();
  }
}

// A tp 4 x ep 2 export, and its manifest to edit.
class ExportChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    const Checkpoint ckpt = Checkpoint::open(tiny(dir_));
    const Loaded loaded = load(ckpt, 4, 2);
    export_ranks(ckpt, loaded.plan, loaded.ranks, {.out = out_});
    manifest_ = nlohmann::json::parse(read_file(out_ + "/shardload.json"));
  }
  void write_manifest(const nlohmann::json& manifest) {
    write_file(out_ + "/shardload.json", manifest.dump());
  }
  std::string file(int rank) const {
    return out_ + "/model-rank-" + std::to_string(rank) + "-part-0.safetensors";
  }

  TempDir dir_;
  std::string out_ = dir_.file("out");
  nlohmann::json manifest_;
};

TEST_F(ExportChecks, LayoutAskedForMustMatchTheExport) {
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.tp = 8}); }, &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("tp_size"), std::string::npos) << message;
  EXPECT_NE(message.find("expected 4"), std::string::npos) << message;
  EXPECT_NE(message.find("found 8"), std::string::npos) << message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.ep = 4}); }, &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("ep_size"), std::string::npos) << message;
  // Expert parallelism over all ranks means ep 4 here; the export has ep 2.
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.ep_equals_tp = true}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.dtype = DType::kF16}); }, &message),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("\"BF16\""), std::string::npos) << message;
  EXPECT_NE(message.find("\"F16\""), std::string::npos) << message;
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.redundant_experts = 2}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.row_bias = RowBias::kDivided}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.split_shared_experts = false}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {}, 0, {.quantize_fp8 = true}); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { load_export(out_, {4}); }), ErrorKind::kInvalidArgument);
  // What the export holds, asked for explicitly, loads.
  const LoadedExport loaded = load_export(out_, {}, 0,
                                          {.tp = 4,
                                           .ep = 2,
                                           .redundant_experts = 0,
                                           .row_bias = RowBias::kFull,
                                           .split_shared_experts = true,
                                           .dtype = DType::kBF16,
                                           .quantize_fp8 = false});
  EXPECT_EQ(loaded.ranks.size(), 4u);
}

TEST_F(ExportChecks, AManifestWhoseSizesDisagreeWithItsRanksIsRefused) {
  nlohmann::json manifest = manifest_;
  manifest["tp_size"] = 2;
  manifest["moe_tp_size"] = 1;
  write_manifest(manifest);
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kConfig);
  EXPECT_NE(message.find("expected 2"), std::string::npos) << message;
  EXPECT_NE(message.find("found 4"), std::string::npos) << message;

  manifest = manifest_;
  manifest["moe_tp_size"] = 4;  // tp 4 / ep 2 is 2
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }), ErrorKind::kConfig);
}

TEST_F(ExportChecks, ATruncatedRankListIsRefused) {
  nlohmann::json manifest = manifest_;
  manifest["ranks"].erase(3);
  write_manifest(manifest);
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kConfig);
  EXPECT_NE(message.find("expected 4"), std::string::npos) << message;
  EXPECT_NE(message.find("found 3"), std::string::npos) << message;
  // Nor may a rank appear out of place or twice.
  manifest = manifest_;
  std::swap(manifest["ranks"][1], manifest["ranks"][2]);
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }), ErrorKind::kConfig);
  manifest = manifest_;
  manifest["ranks"][2]["files"] = manifest["ranks"][1]["files"];
  manifest["ranks"][2]["rank"] = 2;
  write_manifest(manifest);
  EXPECT_EQ(kind_of([&] { load_export(out_); }), ErrorKind::kConfig);
}

TEST_F(ExportChecks, ARankFileSwappedForAnotherRanksIsRefused) {
  fs::copy_file(file(2), file(1), fs::copy_options::overwrite_existing);
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kInvalidMetadata);
  EXPECT_NE(message.find("model-rank-1-part-0.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("expected \"1\""), std::string::npos) << message;
  EXPECT_NE(message.find("found \"2\""), std::string::npos) << message;
  // Only the ranks asked for are read: rank 0 alone still loads.
  EXPECT_EQ(load_export(out_, {0}).ranks.size(), 1u);
  EXPECT_EQ(kind_of([&] { load_export(out_, {1}); }), ErrorKind::kInvalidMetadata);
}

TEST_F(ExportChecks, ARankFileOfAnotherLayoutIsRefused) {
  // The manifest and its files from a tp 4 x ep 1 export of the same model: every rank number
  // matches, the layout of the files does not.
  TempDir other;
  const Checkpoint ckpt = Checkpoint::open(tiny(other));
  const Loaded loaded = load(ckpt, 4, 1);
  export_ranks(ckpt, loaded.plan, loaded.ranks, {.out = other.file("out")});
  fs::copy_file(other.file("out/model-rank-3-part-0.safetensors"), file(3),
                fs::copy_options::overwrite_existing);
  std::string message;
  EXPECT_EQ(kind_of([&] { load_export(out_); }, &message), ErrorKind::kInvalidMetadata);
  EXPECT_NE(message.find("ep_size"), std::string::npos) << message;
}

}  // namespace
}  // namespace shardload
