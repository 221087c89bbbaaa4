// /dev/shm is writable by every local user: the server must never use a directory, file or link
// someone else put at its name, and must let only this user (or the --shm-group) read its weights.
// The hostile user and the readers are real processes run as nobody/nogroup (setpriv); the tests
// run as root in CI.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"
#include "serve_harness.h"

namespace shardload::testing {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

// Runs `argv` as nobody, with `gid` as its only group.
CommandResult as_nobody(std::vector<std::string> argv, gid_t gid = kNobody) {
  std::vector<std::string> full = {"/usr/bin/setpriv", fmt::format("--reuid={}", kNobody),
                                   fmt::format("--regid={}", gid), "--clear-groups"};
  full.insert(full.end(), argv.begin(), argv.end());
  return run_command(full);
}

std::string group_name(gid_t gid) {
  const struct group* found = getgrgid(gid);
  return found == nullptr ? std::to_string(gid) : found->gr_name;
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

class ShmAccessTest : public TwoModelsTest<31, 32> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "acting as another user needs root (as in CI)";
  }

  static std::vector<std::string> args(const std::string& model, const std::string& name,
                                       const std::vector<std::string>& more = {}) {
    return serve_args(model, name, more);
  }

  // The exit code of a start that must be refused; nullopt (and a failure) when it listens.
  static std::optional<int> refused_start(ServerProcess& server) {
    const auto deadline = Clock::now() + kStartTimeout;
    while (Clock::now() < deadline) {
      if (const auto code = server.wait_exit(std::chrono::seconds(0))) return code;
      if (server.out().find("listening on") != std::string::npos) {
        ADD_FAILURE() << "the server started\n" << server.output();
        return std::nullopt;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the server neither started nor exited\n" << server.output();
    return std::nullopt;
  }

  // Starts a server on the first model under NAME and expects NOTE in what it prints by the time it
  // listens (why it reused or reloaded the directory); stops it.
  static void expect_start_note(const std::string& name, const std::string& note) {
    ServerProcess server(args(first_, name));
    ASSERT_GT(server.wait_for_port(), 0);
    EXPECT_NE(server.out().find(note), std::string::npos) << server.output();
    stop(server);
  }

  // Moves rank-0.bin of DIR into ELSEWHERE (another file system: copied, then removed), so that a
  // link can be planted in its place; returns where it is now.
  static std::string move_rank_file(const std::string& dir, const TempDir& elsewhere) {
    const std::string moved = elsewhere.file("victim.bin");
    fs::copy_file(dir + "/rank-0.bin", moved);
    fs::remove(dir + "/rank-0.bin");
    return moved;
  }

  // Runs a server with --keep on `model` until it listens, then stops it: the directory stays.
  static void keep_directory(const std::string& model, const std::string& name) {
    ServerProcess server(args(model, name, {"--keep"}));
    ASSERT_GT(server.wait_for_port(), 0);
    stop(server);
  }
};

// Another user made the directory first (and could still write into it): refused, untouched.
TEST_F(ShmAccessTest, ADirectoryPreCreatedByAnotherUserIsRefused) {
  const std::string name = unique_name("foreign");
  const ShmCleanup cleanup(name);
  const std::string planted = cleanup.dir() + "/manifest.json";
  ASSERT_EQ(as_nobody({"mkdir", "-m", "0777", cleanup.dir()}).exit_code, 0);
  ASSERT_EQ(as_nobody({"sh", "-c", "echo planted > " + planted}).exit_code, 0);

  ServerProcess server(args(first_, name));
  EXPECT_EQ(refused_start(server), 1);
  const std::string err = server.err();
  EXPECT_NE(err.find(cleanup.dir()), std::string::npos) << err;
  EXPECT_NE(err.find("owned by another user"), std::string::npos) << err;
  EXPECT_NE(err.find("uid 65534"), std::string::npos) << err;  // the owner found
  EXPECT_NE(err.find("uid 0"), std::string::npos) << err;      // the owner expected
  EXPECT_EQ(lstat_of(cleanup.dir()).st_uid, kNobody);
  EXPECT_TRUE(read_file(planted) == "planted\n") << "the planted manifest was overwritten";
  EXPECT_FALSE(fs::exists(cleanup.dir() + "/rank-0.bin"));
}

// The name is a link to a directory outside /dev/shm: refused, and nothing is written there.
TEST_F(ShmAccessTest, ASymlinkedDirectoryIsRefusedAndItsTargetUntouched) {
  const std::string name = unique_name("dirlink");
  const ShmCleanup cleanup(name);
  const TempDir target;
  write_file(target.file("keep.txt"), std::string_view("victim"));
  ASSERT_EQ(as_nobody({"ln", "-s", target.path().string(), cleanup.dir()}).exit_code, 0);

  ServerProcess server(args(first_, name));
  EXPECT_EQ(refused_start(server), 1);
  EXPECT_NE(server.err().find("symbolic link"), std::string::npos) << server.err();
  EXPECT_TRUE(fs::is_symlink(cleanup.dir()));
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(target.path())) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"keep.txt"});
  EXPECT_EQ(read_file(target.file("keep.txt")), "victim");
}

// A directory of this user that others may write to (here a link to a file of the right size was
// planted in it): refused before any file in it is opened, and the link's target is not written.
TEST_F(ShmAccessTest, ADirectoryOthersCanWriteIsRefusedAndAPlantedLinkNotWrittenThrough) {
  const ServeName cleanup("openmode");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const TempDir elsewhere;
  const std::string victim = move_rank_file(cleanup.dir(), elsewhere);
  fs::permissions(cleanup.dir(), fs::perms::all);
  ASSERT_EQ(as_nobody({"ln", "-s", victim, cleanup.dir() + "/rank-0.bin"}).exit_code, 0);
  const std::string before = read_file(victim);

  // Another model: a server that accepted the directory would load it in place, through the link.
  ServerProcess server(args(second_, cleanup.name()));
  EXPECT_EQ(refused_start(server), 1);
  EXPECT_NE(server.err().find("writable by group or others"), std::string::npos) << server.err();
  EXPECT_TRUE(read_file(victim) == before) << "the server wrote through the planted link";
}

// A rank file that is a link in the server's own directory is never opened: it is replaced by a
// new file and its target keeps its bytes.
TEST_F(ShmAccessTest, ASymlinkedRankFileIsReplacedNotWrittenThrough) {
  const ServeName cleanup("filelink");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const TempDir elsewhere;
  const std::string victim = move_rank_file(cleanup.dir(), elsewhere);
  fs::create_symlink(victim, cleanup.dir() + "/rank-0.bin");
  const std::string before = read_file(victim);

  ServerProcess server(args(second_, cleanup.name()));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(server.out().find("reloading: " + cleanup.dir() + "/rank-0.bin is a symbolic link"),
            std::string::npos)
      << server.output();
  EXPECT_TRUE(read_file(victim) == before) << "the server wrote through the planted link";
  const struct stat st = lstat_of(cleanup.dir() + "/rank-0.bin");
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(second_, layout(2, 2)));
  stop(server);
}

// A link left at the old fixed temporary name of the manifest is neither written through nor
// renamed into place: temporary manifests have unique names and are created exclusively.
TEST_F(ShmAccessTest, TheManifestIsNeverWrittenThroughALink) {
  const ServeName cleanup("manifestlink");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const TempDir elsewhere;
  const std::string victim = elsewhere.file("victim.txt");
  write_file(victim, std::string_view("victim"));
  fs::create_symlink(victim, cleanup.dir() + "/manifest.json.tmp");

  ServerProcess server(args(first_, cleanup.name()));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", second_}});
  EXPECT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(read_file(victim), "victim");
  EXPECT_TRUE(S_ISREG(lstat_of(cleanup.dir() + "/manifest.json").st_mode));
  EXPECT_EQ(read_manifest(cleanup.dir())["version"], 1);
  stop(server);
}

// A manifest that is a link (to a copy that matches) is not followed: the start reloads.
TEST_F(ShmAccessTest, AManifestThatIsALinkIsNotRead) {
  const ServeName cleanup("manifestread");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const TempDir elsewhere;
  const std::string copy = elsewhere.file("manifest.json");
  fs::copy_file(cleanup.dir() + "/manifest.json", copy);
  fs::remove(cleanup.dir() + "/manifest.json");
  fs::create_symlink(copy, cleanup.dir() + "/manifest.json");

  expect_start_note(cleanup.name(), "reloading: no usable manifest.json: " + cleanup.dir() +
                                        "/manifest.json is a symbolic link");
}

// A manifest above the 64 MiB bound is not read (a start never parses an unbounded file).
TEST_F(ShmAccessTest, AnOversizedManifestIsNotRead) {
  const ServeName cleanup("manifestbig");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const std::string manifest = read_file(cleanup.dir() + "/manifest.json");
  // The same JSON after 64 MiB of white space: valid, and matching, but too long to read.
  write_file(cleanup.dir() + "/manifest.json", std::string(size_t{64} << 20, ' ') + manifest);

  expect_start_note(cleanup.name(), "reloading: " + cleanup.dir() +
                                        "/manifest.json: manifest.json too large (expected at most");
}

// A kept directory of this user whose modes let others read (as an older server left them under a
// 022 umask) is reused with its modes set again: 0700 and 0600.
TEST_F(ShmAccessTest, AReusedDirectoryGetsItsModesSetAgain) {
  const ServeName cleanup("remode");
  ASSERT_NO_FATAL_FAILURE(keep_directory(first_, cleanup.name()));
  const std::vector<std::string> files = {"/manifest.json", "/rank-0.bin", "/rank-1.bin"};
  ASSERT_EQ(::chmod(cleanup.dir().c_str(), 0755), 0);
  for (const std::string& file : files) ASSERT_EQ(::chmod((cleanup.dir() + file).c_str(), 0644), 0);

  ServerProcess server(args(first_, cleanup.name()));
  ASSERT_GT(server.wait_for_port(), 0);
  EXPECT_NE(server.out().find("reusing"), std::string::npos) << server.output();
  EXPECT_EQ(lstat_of(cleanup.dir()).st_mode & 07777, 0700u);
  for (const std::string& file : files) {
    EXPECT_EQ(lstat_of(cleanup.dir() + file).st_mode & 07777, 0600u) << file;
  }
  stop(server);
}

// Without --shm-group only this user can read: directory 0700, files 0600, whatever the umask.
TEST_F(ShmAccessTest, OtherUsersCannotReadByDefault) {
  const std::string name = unique_name("private");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name));
  ASSERT_GT(server.wait_for_port(), 0);
  EXPECT_EQ(lstat_of(cleanup.dir()).st_mode & 07777, 0700u);
  for (const char* file : {"/manifest.json", "/rank-0.bin", "/rank-1.bin"}) {
    EXPECT_EQ(lstat_of(cleanup.dir() + file).st_mode & 07777, 0600u) << file;
  }
  const CommandResult read = as_nobody({"cat", cleanup.dir() + "/manifest.json"});
  EXPECT_NE(read.exit_code, 0) << read.out;
  stop(server);
}

// With --shm-group, a reader of that group (another user) maps the weights as docs/serve.md shows; a
// reader outside it cannot.
TEST_F(ShmAccessTest, ReadersInTheShmGroupCanReadOthersCannot) {
  const std::string name = unique_name("group");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, {"--shm-group", group_name(kNobody)}));
  ASSERT_GT(server.wait_for_port(), 0) << server.output();
  const struct stat dir = lstat_of(cleanup.dir());
  EXPECT_EQ(dir.st_mode & 07777, 0750u);
  EXPECT_EQ(dir.st_gid, kNobody);
  for (const char* file : {"/manifest.json", "/rank-0.bin", "/rank-1.bin"}) {
    const struct stat st = lstat_of(cleanup.dir() + file);
    EXPECT_EQ(st.st_mode & 07777, 0640u) << file;
    EXPECT_EQ(st.st_gid, kNobody) << file;
  }
  const std::string manifest = read_file(cleanup.dir() + "/manifest.json");
  const CommandResult in_group = as_nobody({"cat", cleanup.dir() + "/manifest.json"});
  EXPECT_EQ(in_group.exit_code, 0) << in_group.err;
  EXPECT_EQ(in_group.out, manifest);
  const CommandResult header = as_nobody({"head", "-c", "8", cleanup.dir() + "/rank-1.bin"});
  EXPECT_EQ(header.exit_code, 0) << header.err;
  EXPECT_EQ(header.out, "SHLDSHM1");
  // gid 1 (daemon on Debian): not the server's group.
  const CommandResult outside = as_nobody({"cat", cleanup.dir() + "/manifest.json"}, 1);
  EXPECT_NE(outside.exit_code, 0) << outside.out;
  stop(server);
}

TEST_F(ShmAccessTest, AnUnknownShmGroupIsAUsageError) {
  const std::string name = unique_name("nogroup");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, {"--shm-group", "no-such-group-shardload"}));
  const std::optional<int> code = refused_start(server);
  EXPECT_TRUE(code.has_value() && *code != 0);
  EXPECT_NE(server.err().find("--shm-group"), std::string::npos) << server.err();
}

// A process of another user running in the background (setpriv), killed when the object goes.
class NobodyProcess {
 public:
  explicit NobodyProcess(const std::vector<std::string>& argv, gid_t gid = kNobody) {
    std::vector<std::string> full = {"/usr/bin/setpriv", fmt::format("--reuid={}", kNobody),
                                     fmt::format("--regid={}", gid), "--clear-groups"};
    full.insert(full.end(), argv.begin(), argv.end());
    std::vector<char*> args;
    for (std::string& a : full) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      // Its own process group, and none of the test's output pipes: what it starts (flock runs its
      // command as a child) dies with it and cannot keep ctest waiting on the output.
      ::setpgid(0, 0);
      const int null_fd = ::open("/dev/null", O_RDWR);
      for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);
      execv(args[0], args.data());
      _exit(127);
    }
    ::setpgid(pid_, pid_);  // also here, so the group exists before the destructor can run
  }
  ~NobodyProcess() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Whether it still runs (it exits at once when it could not do what it was started for).
  bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

// A reader's probe must never stop a server from starting: a member of the --shm-group that holds a
// shared lock on the directory (what readers took before) for as long as it likes does not, and the
// server's own lock is a file no one else can open.
TEST_F(ShmAccessTest, AReaderHoldingALockCannotDenyTheName) {
  const std::string name = unique_name("deny");
  const ShmCleanup cleanup(name);
  const std::vector<std::string> group = {"--shm-group", group_name(kNobody), "--keep"};
  {
    ServerProcess server(args(first_, name, group));
    ASSERT_GT(server.wait_for_port(), 0);
    const struct stat lock = lstat_of(cleanup.dir() + "/server.lock");
    EXPECT_EQ(lock.st_mode & 07777, 0600u);
    const CommandResult open_lock = as_nobody({"/usr/bin/flock", "-n", "-s", cleanup.dir() + "/server.lock", "true"});
    EXPECT_NE(open_lock.exit_code, 0) << "another user could open the server's lock";
    stop(server);
  }
  // The directory kept, readable by the group: a member holds a shared lock on it, forever.
  NobodyProcess holder({"/usr/bin/flock", "-s", cleanup.dir(), "sleep", "600"});
  // And every lock it can take on the file readers probe (flock locks are not the server's fcntl ones).
  NobodyProcess alive_holder({"/usr/bin/flock", "-x", cleanup.dir() + "/server.alive", "sleep", "600"});
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(holder.running()) << "the group member could not take the directory's lock";
  ASSERT_TRUE(alive_holder.running()) << "the group member could not lock server.alive";
  ServerProcess server(args(first_, name, group));
  ASSERT_GT(server.wait_for_port(), 0) << server.output();
  EXPECT_EQ(server.out().find("another shardload serve"), std::string::npos) << server.output();
  stop(server);
}

// Without --api-key another local user cannot change the weights (nor learn anything about files
// through the server's errors): the key is in a file only the server's user reads.
TEST_F(ShmAccessTest, AnotherUserCannotChangeTheWeightsByDefault) {
  const std::string name = unique_name("api");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  EXPECT_NE(as_nobody({"cat", cleanup.dir() + "/api-key"}).exit_code, 0);
  const std::string url = fmt::format("http://127.0.0.1:{}", port);
  for (const std::string& model : {second_, std::string("/etc/shadow")}) {
    const CommandResult posted =
        as_nobody({"/usr/bin/curl", "-s", "-w", "\n%{http_code}", "-d", nlohmann::json{{"model_path", model}}.dump(),
                   url + "/update_weights_from_disk"});
    EXPECT_TRUE(posted.out.ends_with("\n401")) << posted.out << posted.err;
    // Nothing about the file: the request is refused before its body is read.
    EXPECT_EQ(posted.out.find("length"), std::string::npos) << posted.out;
    EXPECT_EQ(posted.out.find(model), std::string::npos) << posted.out;
  }
  EXPECT_EQ(served_version(port), 0u);
  EXPECT_EQ(mapped_checksums(cleanup.dir()), expected_checksums(first_, layout(2, 2)));
  stop(server);
}

// With --shm-group its members may: they read the key (0640) and send it.
TEST_F(ShmAccessTest, TheShmGroupCanChangeTheWeightsWithTheKey) {
  const std::string name = unique_name("apigroup");
  const ShmCleanup cleanup(name);
  ServerProcess server(args(first_, name, {"--shm-group", group_name(kNobody)}));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0);
  const struct stat key = lstat_of(cleanup.dir() + "/api-key");
  EXPECT_EQ(key.st_mode & 07777, 0640u);
  EXPECT_EQ(key.st_gid, kNobody);
  const CommandResult posted = as_nobody(
      {"/bin/sh", "-c",
       fmt::format("/usr/bin/curl -s -H \"Authorization: Bearer $(cat {}/api-key)\" -d '{}' "
                   "http://127.0.0.1:{}/update_weights_from_disk",
                   cleanup.dir(), nlohmann::json{{"model_path", second_}}.dump(), port)});
  EXPECT_EQ(posted.exit_code, 0) << posted.err;
  EXPECT_NE(posted.out.find("\"success\":true"), std::string::npos) << posted.out;
  EXPECT_EQ(served_version(port), 1u);
  // A user outside the group cannot read the key.
  EXPECT_NE(as_nobody({"cat", cleanup.dir() + "/api-key"}, 1).exit_code, 0);
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
