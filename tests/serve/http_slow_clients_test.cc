// Clients that send a request a byte at a time must not starve the server: health checks are
// still answered, connections beyond the limit are refused at once with 503 (never left hanging),
// and SIGTERM still stops the server. Deadlines here only catch hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

// `count` connections, each sending the headers of a large POST and then one body byte per round
// for as long as the object lives.
class TricklingClients {
 public:
  TricklingClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      auto connection = std::make_unique<RawConnection>(port);
      connection->send(
          "POST /rebalance HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          "Content-Length: 1000000\r\n\r\n{");
      connections_.push_back(std::move(connection));
    }
    thread_ = std::thread([this] {
      while (!done_) {
        for (auto& connection : connections_) connection->send(" ");
        std::this_thread::sleep_for(200ms);
      }
    });
  }
  ~TricklingClients() {
    done_ = true;
    thread_.join();
  }

 private:
  std::vector<std::unique_ptr<RawConnection>> connections_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A health check with a deadline that only a starved server misses.
HttpReply health(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(30s);
  c.set_read_timeout(30s);
  return to_reply(c.Get("/health"));
}

class HttpSlowClientsTest : public OneModelTest<41> {};

TEST_F(HttpSlowClientsTest, TricklingBodiesStarveNeitherHealthNorShutdown) {
  TestServer server("trickle", model_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  {
    const TricklingClients clients(port, 32);
    const HttpReply reply = health(port);
    EXPECT_EQ(reply.status, 200) << reply.text;
    EXPECT_TRUE(reply.body.is_object() && reply.body.value("status", "") == "ok") << reply.text;
    // SIGTERM while they still trickle.
    stop(server);
  }
  EXPECT_FALSE(std::filesystem::exists(server.dir()));
}

TEST_F(HttpSlowClientsTest, ConnectionsBeyondTheLimitAreRefusedAtOnce) {
  TestServer server("limit", model_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  {
    const TricklingClients clients(port, kServeMaxConnections);
    const HttpReply refused = health(port);
    EXPECT_EQ(refused.status, 503) << refused.text;
    ASSERT_TRUE(refused.body.is_object()) << refused.text;
    EXPECT_EQ(refused.body["success"], false);
  }
  // Their connections closed, the server answers again.
  HttpReply reply;
  const auto deadline = Clock::now() + kRequestTimeout;
  while (Clock::now() < deadline) {
    reply = health(port);
    if (reply.status == 200) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(reply.status, 200) << reply.text;
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
