// What an export killed part-way leaves beside --out, and what the next export to the same --out
// does with it: a staging directory whose process is gone is removed, one a running export holds is
// kept, anything not provably an abandoned staging directory is kept; both are told. And the order
// of the syncs that keep a power cut from leaving a manifest that names files that are not whole.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "run_command.h"
#include "shardload/export.h"
#include "shardload_bin.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload {
namespace {

namespace fs = std::filesystem;
using ::shardload::testing::CommandResult;
using ::shardload::testing::run_command;
using ::shardload::testing::run_shardload;
using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// DIR as the export names it (--out is resolved, symlinks and all, before anything is written).
fs::path real(const TempDir& dir) { return fs::canonical(dir.path()); }

// The staging directories of exports to DIR/out.
std::vector<fs::path> staging_dirs(const TempDir& dir) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.path())) {
    if (entry.path().filename().string().starts_with(".out.shardload-tmp-"))
      out.push_back(entry.path());
  }
  return out;
}

CommandResult export_to_out(const TempDir& dir, const std::string& model,
                            const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"export", model, "--tp", "2", "--out", dir.file("out")};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_shardload(args);
}

// An export SIGKILLed after its first rank's files were written leaves its staging directory (a
// kill runs no destructor); the next export to the same --out removes it, says so, and is whole.
TEST(StagingRecovery, TheNextExportRemovesTheStagingDirectoryOfAKilledOne) {
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 5);
  const CommandResult killed =
      run_command({"/usr/bin/env", "SHARDLOAD_FAULT=kill_at:export_rank_written", testing::shardload_bin(),
                   "export", model, "--tp", "2", "--out", dir.file("out")});
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL) << killed.err;
  const std::vector<fs::path> left = staging_dirs(dir);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(fs::exists(left[0] / "model-rank-0-part-0.safetensors"));
  EXPECT_FALSE(fs::exists(dir.file("out")));

  const CommandResult again = export_to_out(dir, model);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("note: removed " + (real(dir) / left[0].filename()).string()),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("process is gone"), std::string::npos) << again.err;
  EXPECT_TRUE(staging_dirs(dir).empty());
  EXPECT_TRUE(is_export_dir(dir.file("out")));
  EXPECT_EQ(load_export(dir.file("out")).ranks.size(), 2u);
}

// A staging directory named like an export's, with the lock file an export makes, locked by a live
// process (this test): an export still running. The next export keeps it, whole, and says why;
// once its holder is gone, the export after removes it.
TEST(StagingRecovery, AStagingDirectoryARunningExportHoldsIsKept) {
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 5);
  const fs::path running = dir.path() / ".out.shardload-tmp-0123abcd";
  fs::create_directory(running);
  write_file((running / "model-rank-0-part-0.safetensors").string(), "half written");
  const std::string lock_path = (running / ".shardload-staging.lock").string();
  const int lock = ::open(lock_path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);

  const CommandResult held = export_to_out(dir, model);
  ASSERT_EQ(held.exit_code, 0) << held.err;
  const std::string named = (real(dir) / running.filename()).string();
  EXPECT_NE(held.err.find("note: left " + named), std::string::npos) << held.err;
  EXPECT_NE(held.err.find("still running holds its lock"), std::string::npos) << held.err;
  EXPECT_TRUE(fs::exists(running / "model-rank-0-part-0.safetensors"));

  ::close(lock);  // the holder is gone
  const CommandResult after = export_to_out(dir, model, {"--overwrite"});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_NE(after.err.find("note: removed " + named), std::string::npos) << after.err;
  EXPECT_FALSE(fs::exists(running));
}

// What cannot be proven an abandoned staging directory stays, named: one without the lock file
// (an older shardload's, or an --overwrite's old export parked under that name), a symlink to a
// directory that looks like one (nothing is followed), one holding a directory, and the old export
// an interrupted --overwrite moved aside.
TEST(StagingRecovery, WhatIsNotProvablyAbandonedStays) {
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 5);
  const fs::path unlocked = dir.path() / ".out.shardload-tmp-00000001";
  fs::create_directory(unlocked);
  write_file((unlocked / "user-notes.txt").string(), "mine");
  // A directory elsewhere that a staging directory's name links to.
  const fs::path elsewhere = dir.path() / "elsewhere";
  fs::create_directory(elsewhere);
  write_file((elsewhere / ".shardload-staging.lock").string(), "");
  write_file((elsewhere / "precious").string(), "keep");
  const fs::path link = dir.path() / ".out.shardload-tmp-00000002";
  fs::create_directory_symlink(elsewhere, link);
  const fs::path nested = dir.path() / ".out.shardload-tmp-00000003";
  fs::create_directories(nested / "sub");
  write_file((nested / ".shardload-staging.lock").string(), "");
  const fs::path old = dir.path() / ".out.shardload-old-00000004";
  fs::create_directory(old);
  // Not the name an export makes (not 8 hex digits): not even looked at.
  const fs::path other = dir.path() / ".out.shardload-tmp-backup";
  fs::create_directory(other);
  write_file((other / ".shardload-staging.lock").string(), "");

  const CommandResult result = export_to_out(dir, model);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const fs::path& kept : {unlocked, link, nested, old}) {
    EXPECT_NE(result.err.find("note: left " + (real(dir) / kept.filename()).string()),
              std::string::npos)
        << kept << ": " << result.err;
  }
  EXPECT_NE(result.err.find("no lock file"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("not a directory of this user"), std::string::npos) << result.err;
  EXPECT_TRUE(fs::exists(unlocked / "user-notes.txt"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(elsewhere / "precious"));
  EXPECT_TRUE(fs::exists(nested / "sub"));
  EXPECT_TRUE(fs::exists(old));
  EXPECT_TRUE(fs::exists(other / ".shardload-staging.lock"));
  EXPECT_EQ(result.err.find(other.filename().string()), std::string::npos) << result.err;
}

// The export's file system calls as strace saw them, one per line with the paths of descriptors.
std::vector<std::string> traced_export(const TempDir& dir, const std::string& model,
                                       std::string* why_not) {
  const std::string trace = dir.file("trace");
  const CommandResult result =
      run_command({"/usr/bin/strace", "-f", "-y", "-qq", "-o", trace, "-e",
                   "trace=fsync,fdatasync,openat,rename,renameat,renameat2", testing::shardload_bin(),
                   "export", model, "--tp", "2", "--out", dir.file("out")});
  if (result.exit_code != 0) {
    *why_not = "strace " + std::to_string(result.exit_code) + ": " + result.err;
    return {};
  }
  std::vector<std::string> lines;
  std::ifstream file(trace);
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

// The first line at or after `from` that holds every one of `parts`; npos when none does.
size_t find_line(const std::vector<std::string>& lines, std::vector<std::string> parts,
                 size_t from = 0) {
  for (size_t i = from; i < lines.size(); ++i) {
    bool all = true;
    for (const std::string& part : parts) all = all && lines[i].find(part) != std::string::npos;
    if (all) return i;
  }
  return std::string::npos;
}

// Each rank file is synced before its rename, the staging directory before the manifest is
// created, the manifest and the directory again before the move, and the parent after it.
TEST(StagingRecovery, EverythingIsSyncedBeforeTheManifestAndTheMove) {
  if (!fs::exists("/usr/bin/strace")) GTEST_SKIP() << "strace is not installed";
  TempDir dir;
  const std::string model = ::shardload::testing::make_tiny_model(dir, "qwen3_moe", 5);
  std::string why_not;
  const std::vector<std::string> lines = traced_export(dir, model, &why_not);
  if (lines.empty()) GTEST_SKIP() << "cannot trace here (ptrace refused?): " << why_not;
  std::string staging;  // the staging directory, from the first file created in it
  for (const std::string& line : lines) {
    const size_t at = line.find("/.out.shardload-tmp-");
    if (at != std::string::npos) {
      staging = line.substr(line.rfind('"', at) + 1, at - line.rfind('"', at) - 1) +
                line.substr(at, std::string("/.out.shardload-tmp-").size() + 8);
      break;
    }
  }
  ASSERT_FALSE(staging.empty());
  const size_t manifest_created =
      find_line(lines, {"openat(", staging + "/shardload.json", "O_CREAT"});
  ASSERT_NE(manifest_created, std::string::npos);
  for (const char* rank : {"model-rank-0-part-0", "model-rank-1-part-0"}) {
    const size_t synced = find_line(lines, {"fdatasync(", std::string(rank) + ".safetensors.tmp"});
    const size_t renamed = find_line(lines, {"rename", "\"" + staging + "/" + rank});
    EXPECT_LT(synced, renamed) << rank;
    EXPECT_LT(renamed, manifest_created) << rank;
  }
  const size_t dir_synced = find_line(lines, {"fsync(", "<" + staging + ">"});
  EXPECT_LT(dir_synced, manifest_created);
  const size_t manifest_synced =
      find_line(lines, {"fsync(", staging + "/shardload.json>"}, manifest_created);
  const size_t dir_synced_again =
      find_line(lines, {"fsync(", "<" + staging + ">"}, manifest_synced);
  const size_t moved =
      find_line(lines, {"rename(\"" + staging + "\"", (real(dir) / "out").string()});
  // fmt rather than "<" + string&&: g++ 12 -O2 warns (-Wrestrict, a false positive) on the latter here.
  const size_t parent_synced = find_line(lines, {"fsync(", fmt::format("<{}>", real(dir).string())}, moved);
  ASSERT_NE(manifest_synced, std::string::npos);
  ASSERT_NE(dir_synced_again, std::string::npos);
  ASSERT_NE(moved, std::string::npos);
  EXPECT_LT(dir_synced_again, moved);
  EXPECT_NE(parent_synced, std::string::npos);
  EXPECT_TRUE(is_export_dir(dir.file("out")));
}

}  // namespace
}  // namespace shardload
