#include "cli/serve/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/model_revision.h"
#include "cli/parallel_options.h"
#include "cli/process_transport.h"
#include "cli/read_options.h"
#include "core/admission.h"
#include "core/byte_size.h"
#include "core/plural.h"
#include "cli/usage_error.h"
#include "shardload/checkpoint.h"
#include "shardload/device.h"
#include "shardload/distributed.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/mpi_transport.h"
#include "shardload/serve.h"

namespace shardload::cli {
namespace {

struct ServeCommandOptions {
  std::string model;
  std::string revision;
  ParallelOptions parallel;
  std::string name;
  int port = 30000;
  int nodes = 0;  // 0: the MPI node count under a launcher, else 1
  ReadOptions read;
  bool keep = false;
  int threads = 0;
  std::string staging_bytes = "0";
  bool double_buffer = false;
  std::string shm_group;
  std::string host = "127.0.0.1";
  std::string api_key;
  bool insecure_no_api_key = false;
  std::string device = "cpu";
  std::string device_map;
  std::string engine;
};

// Usage errors must be found while the command line is parsed: CLI11 then reports them as such
// (exit 2), where an error thrown by the command itself is a data error (exit 1).
std::string check_name(const std::string& name) {
  try {
    shm_dir(name);
    return "";
  } catch (const Error& e) {
    // CLI11 puts the option's name in front already.
    return fmt::format("{} (expected {}, found {})", e.message(), e.expected(), e.found());
  }
}

uint64_t staging_bytes(const std::string& text) {
  return text == "0" ? 0 : parse_byte_size(text, "--staging-bytes");
}

// CLI11 names the option in front of the message: the message itself says what a size looks like.
std::string check_staging_bytes(const std::string& text) {
  try {
    staging_bytes(text);
    return "";
  } catch (const Error&) {
    return fmt::format("expected a byte size such as 0, 4096, 512M or 2G, found \"{}\"", text);
  }
}

std::string check_shm_group(const std::string& group) {
  return is_known_group(group) ? ""
                               : fmt::format("expected a group name or id, found \"{}\"", group);
}

std::string check_host(const std::string& host) {
  return is_valid_host(host) ? ""
                             : fmt::format("expected a numeric IPv4 or IPv6 address or localhost, "
                                           "found \"{}\"",
                                           host);
}

// The key travels in an HTTP header: visible ASCII only, so that it arrives as written.
std::string check_api_key(const std::string& key) {
  if (key.empty()) return "the API key is empty";
  for (const char c : key) {
    if (c < 0x21 || c > 0x7e) return "the API key must be visible ASCII characters (no spaces)";
  }
  return "";
}

// "listening on HOST:PORT", IPv6 addresses in brackets as in a URL.
std::string listen_address(const std::string& host, int port) {
  return host.find(':') == std::string::npos ? fmt::format("{}:{}", host, port)
                                             : fmt::format("[{}]:{}", host, port);
}

// The server holds every rank in a file of `dir` on /dev/shm, mapped into this process: the files
// must fit on /dev/shm and in this process's memory limits, said before anything is created. What
// `dir` holds already (a server kept with --keep, or killed) is reused or replaced, so it counts as
// room on /dev/shm and, charged to the cgroup already, as room there.
void admit_serve(const Plan& plan, const std::string& dir, bool double_buffer) {
  uint64_t needed = 0;
  for (const RankPlan& rank : plan.ranks) {
    // --double-buffer: two slots of whole pages per rank (the second slot's memory is the cost).
    needed += kShmHeaderBytes + (double_buffer ? 2 * shm_slot_bytes(rank.bytes) : rank.bytes);
  }
  uint64_t held = 0;
  std::error_code ec;
  for (const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && !entry.is_symlink(ec)) held += entry.file_size(ec);
  }
  const std::string what = fmt::format("the rank files of {}", count_of(plan.ranks.size(), "rank"));
  admit_shm(needed, held, std::filesystem::path(dir).parent_path(), what);
  admit_memory(needed, what, held);
}

// SIGTERM and SIGINT are blocked in every thread (the mask is inherited, so it is set before any
// thread exists) and taken by one thread with sigwait, which may call anything: a handler could not
// safely stop the HTTP server.
class TerminationWatcher {
 public:
  TerminationWatcher() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    // A client that hangs up mid-reply must not kill the server.
    signal(SIGPIPE, SIG_IGN);
  }

  // Calls on_signal once, on the watcher thread, when a termination signal arrives.
  void start(std::function<void()> on_signal) {
    thread_ = std::thread([this, on_signal = std::move(on_signal)] {
      int signal_number = 0;
      sigwait(&signals_, &signal_number);
      if (!finished_) on_signal();
    });
  }

  // Ends the watcher (sending it the signal it waits for when the server stopped for another
  // reason) and waits for it, so that its callback is over before what it calls is destroyed.
  void finish() {
    if (!thread_.joinable()) return;
    finished_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  ~TerminationWatcher() { finish(); }

 private:
  sigset_t signals_{};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

void run_serve(const ServeCommandOptions& options) {
  TerminationWatcher watcher;  // first: every thread the server starts inherits the blocked mask
  // An export given for the checkpoint: said as `plan` says it, a usage error, before anything starts.
  if (is_export_dir(options.model)) {
    throw UsageError(fmt::format(
        "{} is a shardload export, not a checkpoint: `shardload serve` takes the checkpoint it was "
        "made from (`shardload load {}` loads the export as it is)",
        options.model, options.model));
  }
  ServeOptions serve;
  serve.model_path = options.model;
  serve.parallel = options.parallel.to_config();
  serve.name = options.name;
  serve.port = options.port;
  Transport* transport = launched_by_mpi() ? &process_transport() : nullptr;
  const int node = transport != nullptr ? transport->node() : 0;
  serve.transport = transport;
  serve.read = options.read.policy();
  serve.nodes = options.nodes > 0 ? options.nodes : transport != nullptr ? transport->nodes() : 1;
  serve.keep = options.keep;
  serve.threads = options.threads;
  serve.staging_bytes = staging_bytes(options.staging_bytes);
  serve.double_buffer = options.double_buffer;
  serve.shm_group = options.shm_group;
  serve.host = options.host;
  serve.api_key = options.api_key;
  serve.insecure_no_api_key = options.insecure_no_api_key;
  serve.device = options.device;
  serve.device_map = parse_device_map(options.device_map);
  if (!options.engine.empty()) serve.engine = *engine_from_name(options.engine);
  if (serve.double_buffer) {
    if (serve.staging_bytes != 0) throw UsageError("--double-buffer and --staging-bytes exclude each other");
    if (serve.device != "cpu") throw UsageError("--double-buffer serves from host memory only (not --device cuda)");
    if (transport != nullptr && transport->nodes() > 1) throw UsageError("--double-buffer runs on one node");
  }
  if (serve.device == "cpu" && !serve.device_map.empty())
    throw UsageError("--device-map needs --device cuda");
  // Its length is the command line's to get right too (exit 2), GPU or not: one GPU per rank, and
  // the server holds every rank of the layout (tp of them).
  if (!serve.device_map.empty() && serve.device_map.size() != static_cast<size_t>(serve.parallel.tp)) {
    throw UsageError(fmt::format("--device-map names {} for {}: it needs one GPU per rank",
                                 count_of(serve.device_map.size(), "GPU"),
                                 count_of(static_cast<uint64_t>(serve.parallel.tp), "rank")));
  }
  // Not yet: each node would mirror its ranks, but no test has run it on several GPU nodes.
  if (serve.device == "cuda" && transport != nullptr && transport->nodes() > 1)
    throw UsageError("--device cuda runs on one node (not under mpirun with several processes)");
  // No usable GPU: an error (exit 1) before anything is loaded or bound.
  if (serve.device == "cuda" && !cuda_unavailable_reason().empty())
    throw Error(ErrorKind::kDevice, fmt::format("--device cuda: {}", cuda_unavailable_reason()));
  const std::string dir =
      node_shm_dir(serve.name, node, transport != nullptr ? transport->nodes() : 1);
  if (serve.staging_bytes != 0 && transport != nullptr && transport->nodes() > 1) {
    // A cluster's update is one atomic commit on every node (docs/distributed.md).
    throw UsageError("--staging-bytes applies to one node (under mpirun updates commit whole)");
  }
  // A layout the model cannot take is a usage error (exit 2) before anything starts, as in the
  // other commands; the server plans again from the same checkpoint. On several nodes every node
  // learns of one node's error (a checkpoint path missing there), so that none starts alone.
  // An engine that cannot take the layout (docs/engines.md: what is refused) is one too.
  if (transport == nullptr) {
    const Plan plan = plan_for_flags(Checkpoint::open(serve.model_path), serve.parallel);
    as_usage_error([&] { check_engine_plan(plan, serve.engine, EngineUse::kHooks); });
    admit_serve(plan, dir, serve.double_buffer);
  } else {
    try {
      run_on_every_node(*transport, [&] {
        try {
          const Plan plan = plan_for_flags(Checkpoint::open(serve.model_path), serve.parallel);
          check_engine_plan(plan, serve.engine, EngineUse::kHooks);
          // A node count that does not divide the ranks (mpirun -np 3 with --tp 4): a usage error
          // too, as for load and export.
          node_ranks(static_cast<int>(plan.ranks.size()), transport->nodes(), node);
        } catch (const UsageError& e) {  // travels as an Error, is a usage error again below
          throw Error(ErrorKind::kInvalidArgument, e.what());
        }
      });
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInvalidArgument) throw UsageError(e.what());
      throw;
    }
  }
  if (node == 0 && serve.insecure_no_api_key) {
    std::cerr << fmt::format(
        "warning: --insecure-no-api-key: {} can rewrite the served weights\n",
        is_loopback_host(serve.host) ? "every user of this host"
                                     : fmt::format("anyone who can reach {}", serve.host));
  }
  {
    WeightServer server(serve);
    watcher.start([&server] { server.stop(); });
    if (node != 0) {
      // One write per line: under mpirun every node's output shares one stream.
      std::cout << fmt::format("node {} of {}: {}; following node 0\n", node, transport->nodes(),
                               server.start_note())
                << std::flush;
    } else {
      std::cout << server.start_note() + "\n";
      if (!serve.insecure_no_api_key) {
        // Where the key is, never the key itself: the output may be logged where others read it.
        std::cout << fmt::format("API key in {}/{} (send \"Authorization: Bearer KEY\"; the Python "
                                 "client reads it)\n",
                                 dir, kShmApiKeyName);
      }
      // Tests and scripts read the port from this line (--port 0 picks a free one).
      std::cout << "listening on " + listen_address(serve.host, server.port()) + "\n" << std::flush;
    }
    bool listened = false;
    try {
      listened = server.run();
    } catch (...) {
      watcher.finish();
      throw;
    }
    // The watcher may be calling stop(): it must be done before the server is destroyed.
    watcher.finish();
    if (!listened) {
      throw Error(ErrorKind::kIo,
                  fmt::format("the server on port {} stopped listening", server.port()));
    }
  }  // the server's destructor removes the shared memory unless --keep
  std::cout << fmt::format("stopped; {} {}\n", serve.keep ? "kept" : "removed", dir) << std::flush;
}

}  // namespace

void add_serve_options(CLI::App& cmd) {
  auto options = std::make_shared<ServeCommandOptions>();
  cmd.footer("Example: shardload serve build/tiny-qwen3-moe --tp 4 --ep 2 --name demo --port 30000");
  cmd.add_option("model", options->model,
                  "Model directory, or a Hugging Face model id in the local cache")
      ->required();
  add_revision_option(cmd, options->revision);
  add_parallel_options(cmd, options->parallel);
  cmd.add_option("--name", options->name, "Shared-memory name: /dev/shm/shardload-NAME")
      ->required()
      ->check(check_name);
  cmd.add_option("--host", options->host,
                 "Address to listen on (numeric IPv4/IPv6 or localhost)")
      ->check(check_host)
      ->capture_default_str();
  auto* api_key = cmd.add_option("--api-key", options->api_key,
                 "The key every request but /health must carry (\"Authorization: Bearer KEY\"); "
                 "default: one made at start. Either way it is in /dev/shm/shardload-NAME/api-key, "
                 "readable by this user (and --shm-group) only. The environment variable keeps it "
                 "out of ps (this option wins over it)")
      ->envname("SHARDLOAD_API_KEY")
      ->check(check_api_key);
  cmd.add_flag("--insecure-no-api-key", options->insecure_no_api_key,
               "No API key: every local user (and, off loopback, anyone who can reach --host) can "
               "change the served weights")
      ->excludes(api_key);
  cmd.add_option("--port", options->port, "HTTP port; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd.add_option("--nodes", options->nodes,
                 "Server nodes N for EPLB (POST /rebalance with expert_load); default: the node "
                 "count under mpirun, else 1")
      ->check(CLI::PositiveNumber);
  add_read_option(cmd, options->read);
  add_stall_timeout_option(cmd);
  cmd.add_flag(
      "--keep", options->keep,
      "Keep the shared memory at exit; a later start with the same model and layout reuses it");
  cmd.add_option("--threads", options->threads, "Loader and update threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option(
         "--staging-bytes", options->staging_bytes,
         "Bound on the bytes an update stages (K/M/G suffixes); 0: one atomic commit per update")
      ->check(check_staging_bytes)
      ->capture_default_str();
  cmd.add_flag("--double-buffer", options->double_buffer,
               "Two slots per rank in shared memory: an update is written once into the slot readers do "
               "not read, and readers pause only for the switch (twice the memory; docs/reload.md)");
  cmd.add_option("--shm-group", options->shm_group,
                 "Let this group read the shared memory (directory 0750, files 0640); default: "
                 "this user only (0700, 0600)")
      ->check(check_shm_group);
  cmd.add_option("--device", options->device,
                 "cuda: every rank also in GPU memory, its CUDA IPC handle in manifest.json "
                 "(docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd.add_option("--engine", options->engine,
                 "Also list each rank's tensors in manifest.json under this engine's names, dtypes "
                 "and buffers (vllm, sglang), for readers that fill that engine's model (docs/engines.md)")
      ->check(CLI::IsMember({"vllm", "sglang"}));
  cmd.add_option("--device-map", options->device_map,
                 "With --device cuda: the GPU of each rank, comma-separated (default: rank % GPUs)")
      ->check([](const std::string& text) {
        try {
          parse_device_map(text);
          return std::string();
        } catch (const Error& e) {
          return fmt::format("{} (expected {}, found {})", e.message(), e.expected(), e.found());
        }
      });
  cmd.callback([options] {
    options->model = model_at_revision(options->model, options->revision);
    run_serve(*options);
  });
}

}  // namespace shardload::cli
