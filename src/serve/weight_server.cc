#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "serve/shm_store.h"
#include "serve/weight_service.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload {
namespace {

// Loopback only: the API rewrites weights and has no authentication.
constexpr const char* kHost = "127.0.0.1";
constexpr size_t kMaxRequestBytes = size_t{64} << 20;  // an expert_load of thousands of layers fits

void send(httplib::Response& response, const serve::Reply& reply) {
  response.status = reply.status;
  response.set_content(reply.body.dump(), "application/json");
}

}  // namespace

struct WeightServer::Impl {
  // The port is bound before the checkpoint is read: a port in use fails at once and leaves
  // /dev/shm alone.
  explicit Impl(const ServeOptions& options) {
    route();
    bind(options.port);
    store.emplace(options);
    service.emplace(*store, options.nodes);
  }

  void route() {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send(res, service->health());
    });
    http.Get("/get_model_info", [this](const httplib::Request&, httplib::Response& res) {
      send(res, service->model_info());
    });
    http.Get("/weights_checksum", [this](const httplib::Request&, httplib::Response& res) {
      send(res, service->weights_checksum());
    });
    http.Post("/update_weights_from_disk",
              [this](const httplib::Request& req, httplib::Response& res) {
                send(res, service->update_weights_from_disk(req.body));
              });
    http.Post("/rebalance", [this](const httplib::Request& req, httplib::Response& res) {
      send(res, service->rebalance(req.body));
    });
    // What escaped an endpoint is the server's fault (e.g. the manifest could not be written).
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string message = "unknown error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            message = e.what();
          } catch (...) {
          }
          send(res, {500, {{"success", false}, {"message", message}}});
        });
    // httplib's default also sets SO_REUSEPORT, which would let a second server bind a port that is
    // in use and share its connections. SO_REUSEADDR alone still allows a restart while old
    // connections linger in TIME_WAIT.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http.set_payload_max_length(kMaxRequestBytes);
    // An idle keep-alive connection holds a worker; a short timeout lets shutdown finish promptly.
    http.set_keep_alive_timeout(1);
  }

  void bind(int requested) {
    port = requested == 0 ? http.bind_to_any_port(kHost)
                          : (http.bind_to_port(kHost, requested) ? requested : -1);
    if (port < 0) {
      throw Error(ErrorKind::kIo, fmt::format("cannot listen on {}:{} (in use?)", kHost, requested),
                  {.field = "--port"});
    }
  }

  httplib::Server http;
  std::optional<serve::ShmStore> store;
  std::optional<serve::WeightService> service;
  int port = -1;
  bool keep = false;
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> in_run{false};
};

WeightServer::WeightServer(const ServeOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    throw Error(ErrorKind::kInvalidArgument, "bad port",
                {.field = "--port", .expected = "0-65535", .found = std::to_string(options.port)});
  }
  if (options.nodes < 1) {
    throw Error(ErrorKind::kInvalidArgument, "bad node count",
                {.field = "--nodes", .expected = ">= 1", .found = std::to_string(options.nodes)});
  }
  impl_ = std::make_unique<Impl>(options);
  impl_->keep = options.keep;
}

WeightServer::~WeightServer() {
  stop();
  if (!impl_->keep) impl_->store->remove();
}

int WeightServer::port() const { return impl_->port; }
const std::string& WeightServer::dir() const { return impl_->store->dir(); }
const std::string& WeightServer::start_note() const { return impl_->store->note(); }
bool WeightServer::reused() const { return impl_->store->reused(); }

bool WeightServer::run() {
  impl_->in_run = true;
  bool ok = true;
  if (!impl_->stop_requested) ok = impl_->http.listen_after_bind();
  impl_->in_run = false;
  return ok;
}

void WeightServer::stop() {
  impl_->stop_requested = true;
  // httplib's stop() does nothing until listening has begun: a stop that lands between run()'s
  // check of the flag and that moment waits for it, or for run() to end.
  while (impl_->in_run && !impl_->http.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->http.stop();
}

}  // namespace shardload
