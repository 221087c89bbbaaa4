#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>

namespace shardload::serve {

// What one connection may cost the server. Slow or idle clients must never starve the others nor
// delay shutdown, so every wait is bounded and the number of connections is too.
struct HttpLimits {
  // Connections queued or being served at once; the next ones get 503 at once and are closed. A
  // thread per slot is started with the server, so that each admitted connection is served at once.
  size_t max_connections = 64;
  // Headers and body of one request must arrive within this, however steadily they trickle.
  std::chrono::seconds request_time{30};
  // A client that sends nothing for this long (within a request) is dropped.
  std::chrono::seconds idle_read{10};
  // Writing one response may take this long, and a client reads nothing for at most idle_write.
  std::chrono::seconds response_time{60};
  std::chrono::seconds idle_write{10};
  // An idle keep-alive connection is closed after this.
  std::chrono::seconds keep_alive{1};
  // Request line and headers together (httplib's own per-line bound applies only once a line ended).
  size_t max_header_bytes = size_t{64} << 10;
  // Raw bytes read for one body, chunk framing included (the decoded body has its own bound).
  size_t max_body_wire_bytes = size_t{128} << 20;
  // Once stop() was called, a response being written gets this much longer; reads end at once.
  std::chrono::seconds stop_grace{2};
};

// httplib::Server with its connection handling replaced: cpp-httplib 0.11.4 (a compiled library in
// Debian, so its CPPHTTPLIB_* macros cannot be changed here) serves every accepted connection from a
// fixed pool of max(8, cores - 1) threads with only a per-read timeout, so a few clients that each
// send a byte now and then hold every thread forever: health checks queue behind them and stop()
// waits for them. Here each connection has deadlines on the whole request and response, stops
// reading when the server stops, and connections beyond the limit are refused with 503.
class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits = {});

  // Runs after a request's headers are read and before its body is: answering (Handled) refuses
  // the request without reading the body, and the connection is closed after the answer.
  void set_admission(HandlerWithResponse admission);

  // After bind_to_port: httplib listens with a backlog of 5, so a burst of connections beyond that
  // waits for the client's SYN retry (1 s, then 3 s) before accept sees it. Linux lets listen()
  // on the bound socket raise it.
  void widen_backlog();

  // From a handler: close this connection after the response (e.g. a body was left half read).
  static void close_connection_after_response();

  const HttpLimits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool stopping() const { return svr_sock_ == INVALID_SOCKET; }

  HttpLimits limits_;
  HandlerWithResponse admission_;
};

}  // namespace shardload::serve
