// Every answer of the weight server is JSON, including the ones HTTP itself produces: an unknown
// route (404), a wrong method (405 with Allow), a body over the limit (413, saying the limit). A
// body sent as `curl -d` sends it (form-encoded) is read like any other, up to that limit, and a
// relative model_path is made absolute as the start-up path is.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "serve_harness.h"

namespace shardload::testing {
namespace {

class HttpErrorsTest : public TwoModelsTest<31, 32> {
 protected:
  // Announces a body one byte over the limit on PATH (HEADERS are added) and never sends it: the
  // server must answer from the headers alone. Status 0 (and a failure) when it cannot be sent.
  static HttpReply announce_too_large(int port, const std::string& path,
                                      const std::string& headers = "") {
    RawConnection connection(port);
    if (!connection.send(fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                     "application/json\r\nContent-Length: {}\r\n{}{}\r\n",
                                     path, kServeMaxBodyBytes + 1, key_header_line(port),
                                     headers))) {
      ADD_FAILURE() << "the request could not be sent";
      return {};
    }
    return parse_raw_reply(connection.read_all());
  }
};

TEST_F(HttpErrorsTest, UnknownRoutesAndWrongMethodsAnswerJson) {
  TestServer server("routes", first_);
  const int port = server.port;
  ASSERT_GT(port, 0);

  const HttpReply unknown = get(port, "/no_such_endpoint");
  EXPECT_EQ(unknown.status, 404);
  ASSERT_TRUE(unknown.body.is_object()) << unknown.text;
  EXPECT_EQ(unknown.body["success"], false);
  EXPECT_NE(unknown.body["message"].get<std::string>().find("/no_such_endpoint"),
            std::string::npos)
      << unknown.text;

  const httplib::Result wrong = client(port)->Get("/rebalance", key_headers(port));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  const HttpReply wrong_reply = to_reply(wrong);
  ASSERT_TRUE(wrong_reply.body.is_object()) << wrong_reply.text;
  EXPECT_EQ(wrong_reply.body["success"], false);

  const httplib::Result post_health = client(port)->Post("/health", key_headers(port), "{}", "application/json");
  ASSERT_TRUE(post_health);
  EXPECT_EQ(post_health->status, 405);
  EXPECT_EQ(post_health->get_header_value("Allow"), "GET, HEAD");
  EXPECT_TRUE(to_reply(post_health).body.is_object()) << post_health->body;

  // The server still works after those.
  EXPECT_EQ(get(port, "/health").status, 200);
  stop(server);
}

TEST_F(HttpErrorsTest, FormEncodedBodiesWorkWellPastEightKilobytes) {
  TestServer server("form", first_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  // What `curl -d @update.json` sends: the JSON as it is, typed application/x-www-form-urlencoded;
  // blanks take it to 100 KB.
  const std::string body =
      R"({"model_path": ")" + second_ + R"(")" + std::string(100'000, ' ') + "}";
  const HttpReply reply = post(port, "/update_weights_from_disk", body,
                               "application/x-www-form-urlencoded", key_headers(port));
  EXPECT_EQ(reply.status, 200) << reply.text;
  EXPECT_EQ(reply.body.value("success", false), true) << reply.text;
  EXPECT_EQ(served_version(port), 1U);
  EXPECT_EQ(endpoint_checksums(port), expected_checksums(second_, layout(2, 2)));
  stop(server);
}

TEST_F(HttpErrorsTest, BodyOverTheLimitAnswers413WithTheLimit) {
  TestServer server("too-large", first_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  const HttpReply reply = announce_too_large(port, "/update_weights_from_disk");
  ASSERT_EQ(reply.status, 413) << reply.text;
  ASSERT_TRUE(reply.body.is_object()) << reply.text;
  EXPECT_EQ(reply.body["success"], false);
  EXPECT_EQ(reply.body["max_body_bytes"], kServeMaxBodyBytes) << reply.text;
  EXPECT_NE(reply.body["message"].get<std::string>().find(std::to_string(kServeMaxBodyBytes)),
            std::string::npos)
      << reply.text;
  EXPECT_EQ(served_version(port), 0U);
  stop(server);
}

TEST_F(HttpErrorsTest, BodyOverTheLimitIsRefusedBeforeContinue) {
  TestServer server("continue", first_);
  const int port = server.port;
  ASSERT_GT(port, 0);
  // What curl sends before a body over 1 MB: the answer must be the refusal, not "100 Continue".
  const HttpReply reply = announce_too_large(port, "/rebalance", "Expect: 100-continue\r\n");
  ASSERT_EQ(reply.status, 413) << reply.text;
  ASSERT_TRUE(reply.body.is_object()) << reply.text;
  EXPECT_EQ(reply.body["max_body_bytes"], kServeMaxBodyBytes) << reply.text;
  stop(server);
}

TEST_F(HttpErrorsTest, RelativeModelPathIsMadeAbsolute) {
  TestServer server("relative", first_);  // the server runs in this process's working directory
  const int port = server.port;
  ASSERT_GT(port, 0);
  const std::string relative =
      std::filesystem::relative(second_, std::filesystem::current_path()).string();
  ASSERT_NE(relative.front(), '/');
  const HttpReply reply = post(port, "/update_weights_from_disk", {{"model_path", relative}});
  ASSERT_EQ(reply.status, 200) << reply.text;
  const std::string absolute = std::filesystem::absolute(second_).lexically_normal().string();
  const HttpReply info = get(port, "/get_model_info");
  EXPECT_EQ(info.body.value("model_path", ""), absolute) << info.text;
  EXPECT_EQ(read_manifest(server.dir()).value("model_path", ""), absolute);
  stop(server);
}

}  // namespace
}  // namespace shardload::testing
