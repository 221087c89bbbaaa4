#include "serve/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

namespace shardload::serve {
namespace {

using Clock = std::chrono::steady_clock;

// How often a wait looks whether the server is stopping.
constexpr auto kSlice = std::chrono::milliseconds(50);

// Where bytes a client sent are read only to be dropped.
using Scrap = std::array<char, 4096>;

// One connection's socket, read through a buffer (httplib reads request lines a byte at a time),
// with every wait bounded by the current request's deadlines and by the server stopping.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, const HttpLimits& limits, std::function<bool()> stopping)
      : sock_(sock), limits_(limits), stopping_(std::move(stopping)) {}

  // Waits (up to the keep-alive time) for the next request to begin; false: close the connection.
  bool wait_for_request() {
    if (pos_ < end_) return true;  // a pipelined request is already buffered
    return wait(POLLIN, Clock::now() + limits_.keep_alive, /*reading=*/true);
  }

  void begin_request() {
    const auto now = Clock::now();
    request_deadline_ = now + limits_.request_time;
    last_read_ = now;
    budget_ = limits_.max_header_bytes;
    response_deadline_.reset();
  }
  // The headers are read: the rest of the request is its body.
  void headers_done() { budget_ = limits_.max_body_wire_bytes; }
  void request_close() { close_ = true; }
  bool close_requested() const { return close_; }

  bool is_readable() const override { return pos_ < end_ || wait(POLLIN, read_deadline(), true); }
  bool is_writable() const override { return wait(POLLOUT, write_deadline(), false); }

  ssize_t read(char* out, size_t size) override {
    if (pos_ == end_) {
      if (budget_ == 0 || !wait(POLLIN, read_deadline(), true)) return -1;
      ssize_t n = 0;
      do {
        n = ::recv(sock_, buffer_.data(), std::min(buffer_.size(), budget_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n < 0 ? -1 : 0;
      budget_ -= static_cast<size_t>(n);
      pos_ = 0;
      end_ = static_cast<size_t>(n);
      last_read_ = Clock::now();
    }
    const size_t n = std::min(size, end_ - pos_);
    std::memcpy(out, buffer_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* data, size_t size) override {
    if (!response_deadline_) {
      last_write_ = Clock::now();
      response_deadline_ = last_write_ + limits_.response_time;
    }
    if (!wait(POLLOUT, write_deadline(), false)) return -1;
    ssize_t n = 0;
    do {
      n = ::send(sock_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    last_write_ = Clock::now();
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      name(address, length, ip, port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      name(address, length, ip, port);
    }
  }
  socket_t socket() const override { return sock_; }

 private:
  static void name(const sockaddr_storage& address, socklen_t length, std::string& ip, int& port) {
    std::array<char, NI_MAXHOST> host{};
    std::array<char, NI_MAXSERV> service{};
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host.data(), host.size(),
                    service.data(), service.size(), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host.data();
      port = std::atoi(service.data());
    }
  }

  Clock::time_point read_deadline() const {
    return std::min(request_deadline_, last_read_ + limits_.idle_read);
  }
  Clock::time_point write_deadline() const {
    const auto last = response_deadline_ ? last_write_ : Clock::now();
    return std::min(response_deadline_.value_or(Clock::time_point::max()),
                    last + limits_.idle_write);
  }

  // Waits until the socket is ready for `events` (or has failed: recv and send then say how), up
  // to `deadline`. Once the server stops, reads end at once and writes get stop_grace more.
  bool wait(short events, Clock::time_point deadline, bool reading) const {
    while (true) {
      const auto now = Clock::now();
      if (stopping_()) {
        if (reading) return false;
        if (!stop_seen_) stop_seen_ = now;
        deadline = std::min(deadline, *stop_seen_ + limits_.stop_grace);
      }
      if (now >= deadline) return false;
      const auto slice = std::min<Clock::duration>(deadline - now, kSlice);
      pollfd fd{sock_, events, 0};
      const int timeout_ms = static_cast<int>(
          std::chrono::ceil<std::chrono::milliseconds>(slice).count());
      const int ready = ::poll(&fd, 1, timeout_ms);
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return false;
    }
  }

  socket_t sock_;
  const HttpLimits& limits_;
  std::function<bool()> stopping_;
  std::array<char, 16384> buffer_{};
  size_t pos_ = 0;
  size_t end_ = 0;
  size_t budget_ = 0;  // bytes this request may still take from the socket
  bool close_ = false;
  Clock::time_point request_deadline_{};
  Clock::time_point last_read_{};
  std::optional<Clock::time_point> response_deadline_;
  Clock::time_point last_write_{};
  mutable std::optional<Clock::time_point> stop_seen_;
};

// Set on the accepting thread while it refuses a connection (see ConnectionQueue).
thread_local bool t_refusing = false;
// The connection a worker thread is serving, for the handlers that run on it.
thread_local ConnectionStream* t_connection = nullptr;

// httplib hands each accepted connection to a TaskQueue as an opaque task that ends in
// process_and_close_socket. This queue admits at most `limit` of them, served at once by as many
// threads; beyond that it runs the task on the accepting thread with t_refusing set, and
// process_and_close_socket answers 503 without blocking.
class ConnectionQueue final : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(size_t limit) : limit_(limit), pool_(limit) {}

  void enqueue(std::function<void()> task) override {
    // Only this (accepting) thread adds: the check and the increment cannot race each other.
    if (busy_.load() >= limit_) {
      t_refusing = true;
      task();
      t_refusing = false;
      return;
    }
    ++busy_;
    pool_.enqueue([this, task = std::move(task)] {
      task();
      --busy_;
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  const size_t limit_;
  std::atomic<size_t> busy_{0};
  httplib::ThreadPool pool_;
};

// Reads and drops what the client already sent, without waiting: closing a socket with unread
// bytes resets the connection, and the client could lose the answer.
void drain_available(socket_t sock) {
  Scrap scrap{};
  for (int i = 0; i < 16; ++i) {
    if (::recv(sock, scrap.data(), scrap.size(), MSG_DONTWAIT) <= 0) break;
  }
}

void refuse(socket_t sock, size_t limit) {
  const std::string body =
      nlohmann::json{{"success", false},
                     {"message", "too many connections (at most " + std::to_string(limit) +
                                     "); retry later"}}
          .dump();
  const std::string reply =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  // Never blocks: this runs on the accepting thread.
  [[maybe_unused]] const ssize_t sent =
      ::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  drain_available(sock);
  ::close(sock);
}

// After an answer that left part of a request unread: stop sending, then read what arrives for a
// moment so that the client sees the answer rather than a reset.
void linger_close(socket_t sock) {
  ::shutdown(sock, SHUT_WR);
  Scrap scrap{};
  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  size_t dropped = 0;
  while (Clock::now() < deadline && dropped < (size_t{1} << 20)) {
    pollfd fd{sock, POLLIN, 0};
    if (::poll(&fd, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(sock, scrap.data(), scrap.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
  ::close(sock);
}

}  // namespace

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  new_task_queue = [this] { return new ConnectionQueue(limits_.max_connections); };
  // Used by httplib for the Keep-Alive header and as socket timeouts behind the waits above.
  set_keep_alive_timeout(limits_.keep_alive.count());
  set_read_timeout(limits_.idle_read.count());
  set_write_timeout(limits_.idle_write.count());
  set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_connection != nullptr) t_connection->headers_done();
    if (admission_ && admission_(req, res) == HandlerResponse::Handled) {
      // The body (if any) was not read: the connection cannot carry another request.
      close_connection_after_response();
      res.set_header("Connection", "close");
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  });
  // A client that asks before sending a large body (curl does above 1 MB) learns at once that
  // the request is refused, instead of being told to go on and then sending the body for nothing.
  set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!admission_ || admission_(req, res) != HandlerResponse::Handled) return 100;
    close_connection_after_response();
    res.set_header("Connection", "close");
    return res.status;
  });
  // httplib adds Keep-Alive unless it closes the connection itself; not when a handler asked to.
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.get_header_value("Connection") == "close") res.headers.erase("Keep-Alive");
  });
}

void HttpServer::set_admission(HandlerWithResponse admission) { admission_ = std::move(admission); }

void HttpServer::widen_backlog() {
  const socket_t sock = svr_sock_;
  if (sock != INVALID_SOCKET) ::listen(sock, SOMAXCONN);
}

void HttpServer::close_connection_after_response() {
  if (t_connection != nullptr) t_connection->request_close();
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (t_refusing) {
    refuse(sock, limits_.max_connections);
    return false;
  }
  bool ok = false;
  bool unread = false;  // a request was answered before it was read to its end
  {
    ConnectionStream stream(sock, limits_, [this] { return stopping(); });
    t_connection = &stream;
    for (size_t left = keep_alive_max_count_; left > 0 && stream.wait_for_request(); --left) {
      stream.begin_request();
      bool client_closes = false;
      ok = process_request(stream, left == 1, client_closes, nullptr);
      if (!ok || client_closes || stream.close_requested()) break;
    }
    t_connection = nullptr;
    unread = stream.close_requested();
  }
  if (unread && !stopping()) {
    linger_close(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ok;
}

}  // namespace shardload::serve
