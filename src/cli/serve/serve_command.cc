#include "cli/serve/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "cli/parallel_options.h"
#include "shardload/error.h"
#include "shardload/export.h"
#include "shardload/serve.h"

namespace shardload::cli {
namespace {

struct ServeCommandOptions {
  std::string model;
  ParallelOptions parallel;
  std::string name;
  int port = 30000;
  int nodes = 1;
  bool keep = false;
  int threads = 0;
  std::string staging_bytes = "0";
  std::string shm_group;
};

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
  ServeOptions serve;
  serve.model_path = options.model;
  serve.parallel = options.parallel.to_config();
  serve.name = options.name;
  serve.port = options.port;
  serve.nodes = options.nodes;
  serve.keep = options.keep;
  serve.threads = options.threads;
  serve.staging_bytes = options.staging_bytes == "0" ? 0 : parse_byte_size(options.staging_bytes);
  serve.shm_group = options.shm_group;
  // A bad name is refused before the checkpoint is read.
  const std::string dir = shm_dir(serve.name);
  {
    WeightServer server(serve);
    watcher.start([&server] { server.stop(); });
    std::cout << server.start_note() << "\n";
    // Tests and scripts read the port from this line (--port 0 picks a free one).
    std::cout << fmt::format("listening on 127.0.0.1:{}", server.port()) << std::endl;
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
  std::cout << fmt::format("stopped; {} {}", serve.keep ? "kept" : "removed", dir) << std::endl;
}

}  // namespace

void add_serve_options(CLI::App& cmd) {
  auto options = std::make_shared<ServeCommandOptions>();
  cmd.add_option("model", options->model, "Model directory")->required();
  add_parallel_options(cmd, options->parallel);
  cmd.add_option("--name", options->name, "Shared-memory name: /dev/shm/shardload-NAME")
      ->required();
  cmd.add_option("--port", options->port, "HTTP port on 127.0.0.1; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd.add_option("--nodes", options->nodes,
                 "Server nodes N for EPLB (POST /rebalance with expert_load)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_flag(
      "--keep", options->keep,
      "Keep the shared memory at exit; a later start with the same model and layout reuses it");
  cmd.add_option("--threads", options->threads, "Loader and update threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option(
         "--staging-bytes", options->staging_bytes,
         "Bound on the bytes an update stages (K/M/G suffixes); 0: one atomic commit per update")
      ->capture_default_str();
  cmd.add_option("--shm-group", options->shm_group,
                 "Let this group read the shared memory (directory 0750, files 0640); default: "
                 "this user only (0700, 0600)");
  cmd.callback([options] { run_serve(*options); });
}

}  // namespace shardload::cli
