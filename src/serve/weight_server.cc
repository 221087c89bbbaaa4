#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/json_input.h"
#include "serve/device_store.h"
#include "serve/http_access.h"
#include "serve/http_server.h"
#include "serve/node_commands.h"
#include "serve/shm_store.h"
#include "serve/weight_service.h"
#include "shardload/distributed.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload {
namespace {

// A body the server accepts is one the request parser accepts.
static_assert(kServeMaxBodyBytes == kRequestJsonLimits.max_bytes);

// Invalid UTF-8 (a request path, a file name) is replaced rather than thrown on.
void send(httplib::Response& response, const serve::Reply& reply) {
  response.status = reply.status;
  response.set_content(reply.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                       "application/json");
}

void send_error(httplib::Response& response, int status, const std::string& message) {
  send(response, {status, {{"success", false}, {"message", message}}});
}

struct Route {
  std::string_view path;
  std::string_view method;  // GET routes answer HEAD too
};

constexpr Route kRoutes[] = {
    {"/health", "GET"},
    {"/get_model_info", "GET"},
    {"/weights_checksum", "GET"},
    {"/update_weights_from_disk", "POST"},
    {"/rebalance", "POST"},
};

const Route* find_route(std::string_view path) {
  for (const Route& route : kRoutes) {
    if (route.path == path) return &route;
  }
  return nullptr;
}

std::string endpoint_list() {
  std::string out;
  for (const Route& route : kRoutes) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", route.method, route.path);
  }
  return out;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// What httplib answers by itself (a malformed request, an unsupported encoding) gets a JSON body
// like every other answer.
std::string status_reason(int status) {
  switch (status) {
    case 400: return "malformed request";
    case 404: return "no such endpoint";
    case 413: return "request too large";
    case 414: return "request line too long";
    case 415: return "unsupported media type";
    case 416: return "bad Range header";
    default: return fmt::format("HTTP error {}", status);
  }
}

}  // namespace

struct WeightServer::Impl {
  // The port is bound before the checkpoint is read: a port in use fails at once and leaves
  // /dev/shm alone.
  // On several nodes, node 0 alone serves HTTP; every node learns whether it could bind before any
  // loads, so that none waits on a node that gave up.
  explicit Impl(const ServeOptions& options)
      : host(options.host),
        api_key(options.api_key.empty() && !options.insecure_no_api_key ? serve::random_api_key()
                                                                         : options.api_key),
        transport(options.transport != nullptr && options.transport->nodes() > 1 ? options.transport
                                                                                 : nullptr) {
    if (transport == nullptr) {
      route();
      bind(options.port);
    } else {
      run_on_every_node(*transport, [&] {
        if (transport->node() != 0) return;
        route();
        bind(options.port);
      });
    }
    store.emplace(options);
    // Node 0 answers HTTP: its directory tells the local readers (and only them) the key.
    if (transport == nullptr || transport->node() == 0) store->write_api_key(api_key);
    if (transport != nullptr) commands.emplace(*store);
    if (options.device == "cuda") device.emplace(*store, options.device_map);
    if (transport == nullptr || transport->node() == 0) {
      service.emplace(*store, options.nodes, commands ? &*commands : nullptr);
    }
  }

  bool follower() const { return commands && store->scope().node != 0; }

  // Runs on the headers alone, before any body is read: a request without the key, to no
  // endpoint, or too large is answered without taking its body.
  httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res) {
    const Route* route = find_route(req.path);
    const bool get = req.method == "GET" || req.method == "HEAD";
    // /health stays open, as in SGLang: load balancers and liveness probes poll it without
    // credentials, and it tells nothing but that the server is up.
    const bool open = api_key.empty() || (req.path == "/health" && get);
    if (!open && !serve::bearer_matches(req.get_header_value("Authorization"), api_key)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401, "missing or wrong API key: send the header \"Authorization: Bearer KEY\"");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (route == nullptr) {
      send_error(res, 404, fmt::format("no endpoint {}; the endpoints are {}", req.path,
                                       endpoint_list()));
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool allowed = route->method == "GET" ? get : req.method == route->method;
    if (!allowed) {
      const std::string allow = route->method == "GET" ? "GET, HEAD" : std::string(route->method);
      res.set_header("Allow", allow);
      send_error(res, 405, fmt::format("{} does not take {}; use {}", req.path, req.method, allow));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (route->method != "POST") return httplib::Server::HandlerResponse::Unhandled;
    // What httplib reads as chunked: exactly this value.
    const bool chunked = lower(req.get_header_value("Transfer-Encoding")) == "chunked";
    if (!chunked && !req.has_header("Content-Length")) {
      // httplib would read such a body until the client closes the connection.
      send_error(res, 411, "a POST needs a Content-Length (or a chunked body)");
      return httplib::Server::HandlerResponse::Handled;
    }
    // httplib would parse it as form data, which no endpoint takes.
    if (lower(req.get_header_value("Content-Type")).starts_with("multipart/")) {
      send_error(res, 415, "send the request as a JSON body, not as multipart form data");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string length = req.get_header_value("Content-Length");
    if (!chunked && (length.size() > 20 || std::strtoull(length.c_str(), nullptr, 10) >
                                               kServeMaxBodyBytes)) {
      send_too_large(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // Answers a request that runs a command on every node. Once a node stalled no command can run
  // again: node 0 answers this request (the stall error, naming the node) and stops serving, and
  // run() then ends with that error, as the other nodes do.
  template <class Command>
  void answer_command(httplib::Response& res, const Command& command) {
    struct StopIfStalled {
      Impl& impl;
      ~StopIfStalled() {
        if (impl.transport != nullptr && impl.transport->stalled()) impl.http.stop();
      }
    } stop_if_stalled{*this};
    send(res, command());
  }

  static void send_too_large(httplib::Response& res) {
    send(res, {413,
               {{"success", false},
                {"message", fmt::format("request body over the limit of {} bytes",
                                        kServeMaxBodyBytes)},
                {"max_body_bytes", kServeMaxBodyBytes}}});
  }

  // The body of a POST, read here rather than by httplib: httplib caps form-encoded bodies (what
  // `curl -d` sends) at 8 KB and reads chunked ones without a bound. nullopt: answered already.
  static std::optional<std::string> read_body(httplib::Response& res,
                                              const httplib::ContentReader& content) {
    std::string body;
    bool too_large = false;
    const bool read = content([&](const char* data, size_t size) {
      if (size > kServeMaxBodyBytes - body.size()) {
        too_large = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    if (read) return body;
    serve::HttpServer::close_connection_after_response();
    if (too_large || res.status == 413) {
      send_too_large(res);
    } else {
      send_error(res, res.status >= 400 ? res.status : 400,
                 "the request body could not be read (cut short, too slow, or badly encoded)");
    }
    return std::nullopt;
  }

  void route() {
    http.set_admission([this](const httplib::Request& req, httplib::Response& res) {
      return admit(req, res);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send(res, service->health());
    });
    http.Get("/get_model_info", [this](const httplib::Request&, httplib::Response& res) {
      send(res, service->model_info());
    });
    http.Get("/weights_checksum", [this](const httplib::Request&, httplib::Response& res) {
      answer_command(res, [&] { return service->weights_checksum(); });
    });
    http.Post("/update_weights_from_disk",
              [this](const httplib::Request&, httplib::Response& res,
                     const httplib::ContentReader& content) {
                if (auto body = read_body(res, content)) {
                  answer_command(res, [&] { return service->update_weights_from_disk(*body); });
                }
              });
    http.Post("/rebalance", [this](const httplib::Request&, httplib::Response& res,
                                   const httplib::ContentReader& content) {
      if (auto body = read_body(res, content)) {
        answer_command(res, [&] { return service->rebalance(*body); });
      }
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [](const httplib::Request&, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          send_error(res, res.status, status_reason(res.status));
          return httplib::Server::HandlerResponse::Handled;
        }));
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
    // A second bound behind read_body's, for any path that lets httplib read a body itself.
    http.set_payload_max_length(kServeMaxBodyBytes);
  }

  void bind(int requested) {
    port = requested == 0 ? http.bind_to_any_port(host)
                          : (http.bind_to_port(host, requested) ? requested : -1);
    if (port < 0) {
      throw Error(ErrorKind::kIo,
                  fmt::format("cannot listen on {}:{} (in use, or not an address of this machine?)",
                              host, requested),
                  {.field = "--port"});
    }
    http.widen_backlog();
  }

  const std::string host;
  const std::string api_key;
  Transport* const transport;  // on several nodes
  serve::HttpServer http{
      serve::HttpLimits{.max_connections = static_cast<size_t>(kServeMaxConnections)}};
  std::optional<serve::ShmStore> store;
  std::optional<serve::NodeCommands> commands;  // on several nodes
  std::optional<serve::DeviceStore> device;     // after store: gone before it
  std::optional<serve::WeightService> service;  // on one node, or node 0
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
  if (!is_valid_host(options.host)) {
    throw Error(ErrorKind::kInvalidArgument, "bad host",
                {.field = "--host",
                 .expected = "a numeric IPv4 or IPv6 address, or localhost",
                 .found = options.host});
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
  if (impl_->follower()) {
    impl_->commands->follow();  // until node 0 stops
    return true;
  }
  impl_->in_run = true;
  bool ok = true;
  if (!impl_->stop_requested) ok = impl_->http.listen_after_bind();
  impl_->in_run = false;
  // The other nodes stop with node 0, after the requests in flight finished.
  if (impl_->commands) impl_->commands->run({{"op", "stop"}});
  return ok;
}

void WeightServer::stop() {
  // A node other than 0 stops when node 0 tells it (a launcher's signal reaches node 0 too).
  if (impl_->follower()) return;
  impl_->stop_requested = true;
  // httplib's stop() does nothing until listening has begun: a stop that lands between run()'s
  // check of the flag and that moment waits for it, or for run() to end.
  while (impl_->in_run && !impl_->http.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->http.stop();
}

}  // namespace shardload
