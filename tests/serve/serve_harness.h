#pragma once

// Drives a real `shardload serve` child process: starts it, reads its port, talks HTTP to it over
// loopback and maps its shared memory the way any other process would. Every wait has a deadline,
// so a broken server fails a test instead of hanging it.

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardload/checkpoint.h"
#include "shardload/loader.h"
#include "shardload/plan.h"
#include "shardload/reload.h"
#include "shardload/serve.h"
#include "shardload/tiny.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace shardload::testing {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Loading under the sanitizers on a shared machine can be slow; a hang is still caught.
inline constexpr auto kStartTimeout = 180s;
inline constexpr auto kExitTimeout = 60s;
inline constexpr auto kRequestTimeout = 120s;

// Unique per process and call, so tests (and parallel ctest runs) never share a directory.
inline std::string unique_name(const std::string& test) {
  static std::atomic<int> counter{0};
  return fmt::format("test-{}-{}-{}", getpid(), test, counter++);
}

// A tiny qwen3_moe checkpoint (8 experts, MoE layers 1-3); a different seed gives different values.
inline std::string make_moe_model(const TempDir& dir, const std::string& name, uint64_t seed) {
  TinyOptions options;
  options.arch = "qwen3_moe";
  options.out = dir.file(name);
  options.seed = seed;
  make_tiny(options);
  return options.out;
}

// Removes /dev/shm/shardload-NAME when a test ends, whatever the server did.
class ShmCleanup {
 public:
  explicit ShmCleanup(std::string name) : dir_(shm_dir(name)) {}
  ~ShmCleanup() {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// The API key of the server listening on each port, as the server's own user reads it from its
// directory (DIR/api-key) once it listens: plain get() and post() send it, as the Python client
// and the engine hooks do; the requests with headers of a test's choosing send only those.
inline std::map<int, std::string>& api_keys() {
  static std::map<int, std::string> keys;
  return keys;
}

// The key a server made for NAME (in node 0's directory when it runs on several nodes), or "".
inline std::string read_api_key(const std::string& name) {
  for (const std::string& dir : {shm_dir(name), shm_dir(name) + ".node-0"}) {
    std::string key;
    try {
      key = read_file(dir + "/" + std::string(kShmApiKeyName));
    } catch (const std::runtime_error&) {
      continue;  // none here (--insecure-no-api-key, or another node's directory)
    }
    while (!key.empty() && key.back() == '\n') key.pop_back();
    if (!key.empty()) return key;
  }
  return "";
}

class ServerProcess {
 public:
  // Starts testing::shardload_bin() serve ARGS... with `env` added to the environment, output to files (a pipe
  // could fill up and block the server).
  // `launcher`, when given, comes first (e.g. timeout and mpirun with their arguments).
  explicit ServerProcess(const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {},
                         const std::vector<std::string>& launcher = {})
      : out_path_(dir_.file("stdout")), err_path_(dir_.file("stderr")) {
    // A test that names a key sends it itself (and may want a request without it answered 401).
    bool own_key = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--name" && i + 1 < args.size()) name_ = args[i + 1];
      own_key |= args[i] == "--api-key";
    }
    for (const std::string& e : env) own_key |= e.starts_with("SHARDLOAD_API_KEY=");
    if (own_key) name_.clear();
    std::vector<std::string> argv = launcher;
    argv.insert(argv.end(), {testing::shardload_bin(), "serve"});
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    envs.insert(envs.end(), env.begin(), env.end());
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<char*> argp;
    for (std::string& a : argv) argp.push_back(a.data());
    argp.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    // The files exist before the child runs, so the parent can read them at once.
    write_file(out_path_, std::string_view());
    write_file(err_path_, std::string_view());
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int out = ::open(out_path_.c_str(), O_WRONLY);
      const int err = ::open(err_path_.c_str(), O_WRONLY);
      const int in = ::open("/dev/null", O_RDONLY);
      if (out < 0 || err < 0 || in < 0) _exit(126);
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      execve(argp[0], argp.data(), envp.data());
      _exit(127);
    }
  }

  ~ServerProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(kExitTimeout);
    }
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  std::string output() const { return "stdout:\n" + out() + "\nstderr:\n" + err(); }
  bool running() const { return !exit_code_.has_value(); }

  // The port from the "listening on 127.0.0.1:PORT" line; -1 (and a test failure) when the server
  // exits first or does not get there in time.
  int wait_for_port(std::chrono::seconds timeout = kStartTimeout) {
    return wait_for_port_on("127.0.0.1", timeout);
  }

  // The port from "listening on ADDRESS:PORT" for a server started with --host; ADDRESS is the
  // host as printed (IPv6 in brackets).
  int wait_for_port_on(const std::string& address, std::chrono::seconds timeout = kStartTimeout) {
    const std::string listening = "listening on " + address + ":";
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      const std::string text = out();
      const size_t at = text.find(listening);
      const size_t end = at == std::string::npos ? at : text.find('\n', at);
      // The whole line, so that a port half written is never read.
      if (end != std::string::npos) {
        const int port = std::stoi(text.substr(at + listening.size()));
        if (!name_.empty()) api_keys()[port] = read_api_key(name_);
        return port;
      }
      if (poll_exit()) {
        ADD_FAILURE() << "the server exited with " << *exit_code_ << " before listening\n"
                      << output();
        return -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the server did not listen within " << timeout.count() << " s\n" << output();
    return -1;
  }

  void signal(int sig) {
    if (running()) ::kill(pid_, sig);
  }

  // The exit code (128 + signal when killed), or nullopt after the timeout.
  std::optional<int> wait_exit(std::chrono::seconds timeout = kExitTimeout) {
    const auto deadline = Clock::now() + timeout;
    while (!poll_exit()) {
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
    return exit_code_;
  }

 private:
  bool poll_exit() {
    if (exit_code_) return true;
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done != pid_) return false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

  TempDir dir_;
  std::string name_;  // --name, when plain get() and post() are to send the key the server made
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

struct FinishedRun {
  std::optional<int> exit_code;  // nullopt: still running at the deadline (then killed)
  std::string out;
  std::string err;
};

// Runs a serve command that is expected to exit by itself (a refused start); unlike run_command it
// cannot hang when the server starts after all.
inline FinishedRun run_to_exit(const std::vector<std::string>& args) {
  ServerProcess process(args);
  FinishedRun run;
  run.exit_code = process.wait_exit(kStartTimeout);
  run.out = process.out();
  run.err = process.err();
  return run;
}

// A rank file mapped read-only, as a reader process maps it.
class MappedRankFile {
 public:
  explicit MappedRankFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + path);
    struct stat st {};
    fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    void* data = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) throw std::runtime_error("cannot map " + path);
    data_ = static_cast<const std::byte*>(data);
  }
  ~MappedRankFile() { munmap(const_cast<std::byte*>(data_), size_); }
  MappedRankFile(const MappedRankFile&) = delete;
  MappedRankFile& operator=(const MappedRankFile&) = delete;

  size_t size() const { return size_; }
  std::string magic() const { return std::string(reinterpret_cast<const char*>(data_), 8); }
  uint64_t sequence() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(data_ + kShmSequenceOffset),
                           __ATOMIC_ACQUIRE);
  }
  // The header's version word and update-in-progress flag (after the sequence word).
  uint64_t version() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(data_ + kShmVersionOffset),
                           __ATOMIC_ACQUIRE);
  }
  uint64_t update_in_progress() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(data_ + kShmUpdateFlagOffset),
                           __ATOMIC_ACQUIRE);
  }
  // The byte offset of the live slot of a double-buffered file (0 in a single one).
  uint64_t active_slot() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(data_ + kShmActiveSlotOffset), __ATOMIC_ACQUIRE);
  }
  std::span<const std::byte> bytes(uint64_t offset, uint64_t n) const {
    return {data_ + offset, n};
  }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Checksums keyed "RANK/TENSOR": the shape every source below produces, so they compare directly.
using Checksums = std::map<std::string, std::string>;

inline std::string checksum_key(int rank, const std::string& name) {
  return fmt::format("{}/{}", rank, name);
}

// What a fresh load of `model` gives, computed in this process.
// The exported tensors of loaded ranks.
inline Checksums rank_checksums(const Plan& plan, const std::vector<RankWeights>& ranks) {
  Checksums out;
  for (const RankWeights& weights : ranks) {
    for (const PlanParam& param : plan.ranks[static_cast<size_t>(weights.rank)].params) {
      if (param.exported()) {
        out[checksum_key(weights.rank, param.name)] = xxh3_hex(param_view(weights, param).data);
      }
    }
  }
  return out;
}

inline Checksums expected_checksums(const std::string& model, const ParallelConfig& parallel) {
  const Checkpoint checkpoint = Checkpoint::open(model);
  const Plan plan = make_plan(checkpoint, parallel);
  return rank_checksums(plan, load_ranks(checkpoint, plan));
}

// The exported tensors of a live model, as expected_checksums gives them for a fresh load.
inline Checksums live_checksums(const LiveModel& live) {
  return rank_checksums(live.plan, live.ranks);
}

inline nlohmann::json read_manifest(const std::string& dir) {
  return nlohmann::json::parse(read_file(dir + "/manifest.json"));
}

// An expert map of the tiny MoE models (3 MoE layers, 8 experts) that sends every expert of the
// first layer to another rank, reverses the second's pairs and keeps the third: at tp 2 x ep 2 or on
// several nodes, slots move within ranks, between ranks and between nodes.
inline std::vector<std::vector<int>> moved_map() {
  return {{7, 6, 5, 4, 3, 2, 1, 0}, {1, 0, 3, 2, 5, 4, 7, 6}, {0, 1, 2, 3, 4, 5, 6, 7}};
}

// Every rank header of the server directory DIR as a reader sees it after a change ended: at
// `version`, no update in progress, an even sequence word.
inline void expect_headers_at(const std::string& dir, uint64_t version) {
  const nlohmann::json manifest = read_manifest(dir);
  ASSERT_FALSE(manifest["ranks"].empty()) << dir;
  for (const nlohmann::json& rank : manifest["ranks"]) {
    SCOPED_TRACE(dir + "/" + rank["file"].get<std::string>());
    const MappedRankFile file(dir + "/" + rank["file"].get<std::string>());
    EXPECT_EQ(file.version(), version);
    EXPECT_EQ(file.update_in_progress(), 0u);
    EXPECT_EQ(file.sequence() % 2, 0u);
  }
}

// XXH3 of every tensor the manifest lists, read from the mapped files with the seqlock protocol: a
// pass that saw an odd word, or a word that moved, is retried.
inline Checksums mapped_checksums(const std::string& dir) {
  const nlohmann::json manifest = read_manifest(dir);
  Checksums out;
  const auto deadline = Clock::now() + kRequestTimeout;
  for (const nlohmann::json& rank : manifest["ranks"]) {
    const MappedRankFile file(dir + "/" + rank["file"].get<std::string>());
    EXPECT_EQ(file.size(), rank["bytes"].get<uint64_t>());
    while (true) {
      const uint64_t before = file.sequence();
      const uint64_t slot = file.active_slot();
      Checksums pass;
      for (const auto& [name, tensor] : rank["tensors"].items()) {
        pass[checksum_key(rank["rank"].get<int>(), name)] =
            xxh3_hex(file.bytes(tensor["offset"].get<uint64_t>() + slot, tensor["nbytes"]));
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (before % 2 == 0 && file.sequence() == before) {
        out.merge(pass);
        break;
      }
      if (Clock::now() > deadline) throw std::runtime_error("the sequence word never settled");
      std::this_thread::sleep_for(1ms);
    }
  }
  return out;
}

// An HTTP client of the server on `port`, with deadlines on connecting and reading.
inline std::unique_ptr<httplib::Client> client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_connection_timeout(10s);
  c->set_read_timeout(kRequestTimeout);
  c->set_write_timeout(30s);
  return c;
}

struct HttpReply {
  int status = 0;  // 0: no reply (connection failed)
  nlohmann::json body;
  std::string text;
};

inline HttpReply to_reply(const httplib::Result& result) {
  HttpReply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.text = result->body;
  reply.body = nlohmann::json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  return reply;
}

// "Authorization: Bearer KEY" for the server on `port` (none when it has no key).
inline httplib::Headers key_headers(int port) {
  const auto it = api_keys().find(port);
  if (it == api_keys().end() || it->second.empty()) return {};
  return {{"Authorization", "Bearer " + it->second}};
}

// The same as a raw header line, for requests written byte by byte.
inline std::string key_header_line(int port) {
  const httplib::Headers headers = key_headers(port);
  return headers.empty() ? "" : "Authorization: " + headers.begin()->second + "\r\n";
}

inline HttpReply get(int port, const std::string& path) {
  return to_reply(client(port)->Get(path, key_headers(port)));
}

inline HttpReply post(int port, const std::string& path, const std::string& body) {
  return to_reply(client(port)->Post(path, key_headers(port), body, "application/json"));
}

inline HttpReply post(int port, const std::string& path, const nlohmann::json& body) {
  return post(port, path, body.dump());
}

// A request with headers of the test's choosing (an Authorization header, a content type).
inline HttpReply get(int port, const std::string& path, const httplib::Headers& headers) {
  return to_reply(client(port)->Get(path, headers));
}

inline HttpReply post(int port, const std::string& path, const std::string& body,
                      const std::string& content_type, const httplib::Headers& headers) {
  return to_reply(client(port)->Post(path, headers, body, content_type));
}

// A plain TCP connection to the server on loopback, for requests no HTTP client would send (a
// body that trickles in, a Content-Length with no body behind it). Every wait has a deadline.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect failed");
    }
    const timeval timeout{.tv_sec = 30, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False once the server closed the connection.
  bool send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }

  // Everything the server sends until it closes the connection (or `timeout` passes).
  std::string read_all(std::chrono::seconds timeout = kRequestTimeout) {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    char buffer[4096];
    while (Clock::now() < deadline) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n > 0) {
        out.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        break;
      }
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// The status and JSON body of a raw HTTP/1.1 answer (status 0 when there is none).
inline HttpReply parse_raw_reply(const std::string& text) {
  HttpReply reply;
  if (text.rfind("HTTP/1.1 ", 0) != 0 || text.size() < 12) return reply;
  reply.status = std::stoi(text.substr(9, 3));
  const size_t body = text.find("\r\n\r\n");
  reply.text = body == std::string::npos ? "" : text.substr(body + 4);
  reply.body = nlohmann::json::parse(reply.text, nullptr, /*allow_exceptions=*/false);
  return reply;
}

inline Checksums endpoint_checksums(int port) {
  const HttpReply reply = get(port, "/weights_checksum");
  EXPECT_EQ(reply.status, 200) << reply.text;
  Checksums out;
  for (const nlohmann::json& rank : reply.body["ranks"]) {
    for (const auto& [name, hash] : rank["tensors"].items()) {
      out[checksum_key(rank["rank"].get<int>(), name)] = hash.get<std::string>();
    }
  }
  return out;
}

inline uint64_t served_version(int port) {
  const HttpReply reply = get(port, "/get_model_info");
  EXPECT_EQ(reply.status, 200) << reply.text;
  return reply.body.value("version", uint64_t{999999});
}

inline ParallelConfig layout(int tp, int ep) {
  ParallelConfig parallel;
  parallel.tp = tp;
  parallel.ep = ep;
  return parallel;
}

// The usual serve command line: MODEL at tp x ep under NAME on a free loopback port with two load
// threads, then MORE.
inline std::vector<std::string> serve_args(const std::string& model, const std::string& name,
                                           const std::vector<std::string>& more = {}, int tp = 2,
                                           int ep = 2) {
  std::vector<std::string> out = {model,    "--tp", std::to_string(tp), "--ep", std::to_string(ep),
                                  "--name", name,   "--port",           "0",    "--threads",
                                  "2"};
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// Stops a server the way an operator does (SIGTERM) and expects a clean exit.
inline void stop(ServerProcess& server) {
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_exit(), 0) << server.output();
}

// The name of one test's server and its /dev/shm directory, which is removed when the test ends.
class ServeName {
 public:
  explicit ServeName(const std::string& test) : name_(unique_name(test)), cleanup_(name_) {}
  const std::string& name() const { return name_; }
  const std::string& dir() const { return cleanup_.dir(); }

 private:
  std::string name_;
  ShmCleanup cleanup_;
};

// A server of one test, started on MODEL (serve_args with MORE, ENV added to its environment)
// under a fresh name, and waited for: `port` is where it listens, -1 (with a failure recorded) when
// it did not start. The name comes first as a base, so its directory is removed after the server
// is gone, whatever the server did.
class TestServer : public ServeName, public ServerProcess {
 public:
  TestServer(const std::string& test, const std::string& model,
             const std::vector<std::string>& more = {}, const std::vector<std::string>& env = {})
      : ServeName(test),
        ServerProcess(serve_args(model, name(), more), env),
        port(wait_for_port()) {}

  const int port;
};

// A suite whose tests share one tiny MoE model, model_, made once (loading is the slow part). The
// seed is the suite's own, so suites never serve the same values.
template <uint64_t Seed>
class OneModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new TempDir();
    model_ = make_moe_model(*models_, "model", Seed);
  }
  static void TearDownTestSuite() {
    delete models_;
    models_ = nullptr;
  }

  static inline TempDir* models_ = nullptr;
  static inline std::string model_;
};

// A suite whose tests share two tiny MoE models with different values, first_ and second_ (an
// update from one to the other changes every tensor), made once.
template <uint64_t FirstSeed, uint64_t SecondSeed>
class TwoModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new TempDir();
    first_ = make_moe_model(*models_, "first", FirstSeed);
    second_ = make_moe_model(*models_, "second", SecondSeed);
  }
  static void TearDownTestSuite() {
    delete models_;
    models_ = nullptr;
  }

  static inline TempDir* models_ = nullptr;
  static inline std::string first_;
  static inline std::string second_;
};

// A snapshot reader of docs/serve.md's recipe, run in a forked child.
struct Stamp {
  uint64_t sequence = 0;
  uint64_t version = 0;
  uint64_t in_progress = 0;
  bool operator==(const Stamp&) const = default;
};

inline std::vector<Stamp> stamps(const std::vector<std::unique_ptr<MappedRankFile>>& files) {
  std::vector<Stamp> out;
  for (const auto& file : files) {
    out.push_back({file->sequence(), file->version(), file->update_in_progress()});
  }
  return out;
}

inline bool settled(const std::vector<Stamp>& all) {
  for (const Stamp& stamp : all) {
    if (stamp.sequence % 2 != 0 || stamp.in_progress != 0) return false;
  }
  return true;
}

// The reader process: docs/serve.md's whole-update recipe over every rank file of `dir` (a server's
// directory, or one node's), repeated until `stop_path` exists and one more snapshot was
// accepted. Each accepted snapshot must be all of `old_sums` or all of `new_sums` (of the ranks
// the directory holds). Writes "ACCEPTED MIXED" to `result_path`; exits 0 when no
// snapshot was mixed. Runs in a forked child: no gtest macros, _exit only.
[[noreturn]] inline void run_snapshot_reader(const std::string& dir, const std::string& stop_path,
                             const std::string& result_path, const Checksums& old_sums,
                             const Checksums& new_sums) {
  int accepted = 0;
  int mixed = 0;
  try {
    const nlohmann::json manifest = read_manifest(dir);
    std::vector<std::unique_ptr<MappedRankFile>> files;
    for (const nlohmann::json& rank : manifest["ranks"]) {
      files.push_back(
          std::make_unique<MappedRankFile>(dir + "/" + rank["file"].get<std::string>()));
    }
    int accepted_after_stop = 0;
    while (accepted_after_stop == 0) {
      const bool stopping = ::access(stop_path.c_str(), F_OK) == 0;
      const std::vector<Stamp> before = stamps(files);
      if (!settled(before)) {
        std::this_thread::yield();
        continue;
      }
      Checksums snapshot;
      for (size_t r = 0; r < files.size(); ++r) {
        const nlohmann::json& rank = manifest["ranks"][r];
        const uint64_t slot = files[r]->active_slot();  // 0 but in a double-buffered file
        for (const auto& [name, tensor] : rank["tensors"].items()) {
          snapshot[checksum_key(rank["rank"].get<int>(), name)] = xxh3_hex(files[r]->bytes(
              tensor["offset"].get<uint64_t>() + slot, tensor["nbytes"].get<uint64_t>()));
        }
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (stamps(files) != before) continue;
      ++accepted;
      if (stopping) ++accepted_after_stop;
      if (snapshot != old_sums && snapshot != new_sums) ++mixed;
    }
  } catch (...) {
    _exit(3);
  }
  write_file(result_path, fmt::format("{} {}", accepted, mixed));
  _exit(mixed == 0 ? 0 : 1);
}

// Tells a run_snapshot_reader child to stop (it accepts one more snapshot) and waits for it; a test
// failure when it never finishes or accepted a mixed snapshot.
inline void stop_snapshot_reader(pid_t reader, const std::string& stop_path, const std::string& result_path) {
  write_file(stop_path, std::string_view("stop"));
  int status = 0;
  const auto deadline = Clock::now() + kRequestTimeout;
  while (waitpid(reader, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(reader, SIGKILL);
      waitpid(reader, &status, 0);
      FAIL() << "the reader never accepted a snapshot after the updates";
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "accepted, mixed: " << read_file(result_path);
}

}  // namespace shardload::testing
