// A model directory is named by whoever sends a request to the weight server, so its files may be
// links to other people's files, FIFOs, or JSON built to exhaust the parser. Each is an Error that
// names the file and never quotes its bytes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "shardload/checkpoint.h"
#include "shardload/error.h"
#include "shardload/safetensors.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;
using ::shardload::testing::write_file;

// Stands for /etc/shadow: a file the server can read and the requester must learn nothing of.
constexpr std::string_view kSecret = "root:$6$saltsalt$hunter2hashhash:19000:0:99999:7:::\n";

void write_model(const TempDir& dir) {
  write_file(dir.file("config.json"), R"({"architectures": ["LlamaForCausalLM"]})");
  const std::array<float, 2> values{1.0f, 2.0f};
  write_safetensors(dir.file("model.safetensors"),
                    {{"a", DType::kF32, {2}, std::as_bytes(std::span(values))}});
}

Error open_error(const std::string& path) {
  try {
    Checkpoint::open(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "opening " << path << " did not fail";
  return Error(ErrorKind::kIo, "none");
}

// Writes a model whose safetensors header is JSON (a one-byte length: JSON is short), and the error
// that opening it gives.
Error open_error_with_header(const std::string& json) {
  TempDir dir;
  write_model(dir);
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(json.size());
  write_file(dir.file("model.safetensors"), bytes + json);
  return open_error(dir.path().string());
}

void expect_no_secret(const Error& e) {
  const std::string what = e.what();
  EXPECT_EQ(what.find("root"), std::string::npos) << what;
  EXPECT_EQ(what.find("hunter2"), std::string::npos) << what;
  EXPECT_EQ(what.find("salt"), std::string::npos) << what;
  // The first 8 bytes read as a little-endian header length.
  uint64_t length = 0;
  std::memcpy(&length, kSecret.data(), 8);
  EXPECT_EQ(what.find(std::to_string(length)), std::string::npos) << what;
}

TEST(HostileInput, ASafetensorsLinkToAnotherFileLeaksNoBytes) {
  TempDir secret;
  write_file(secret.file("shadow"), kSecret);
  TempDir dir;
  write_model(dir);
  std::filesystem::remove(dir.file("model.safetensors"));
  std::filesystem::create_symlink(secret.file("shadow"), dir.file("model.safetensors"));
  const Error e = open_error(dir.path().string());
  EXPECT_EQ(e.kind(), ErrorKind::kHeaderTooLarge) << e.what();
  expect_no_secret(e);
}

TEST(HostileInput, AHeaderLengthPastTheEndIsNotPrinted) {
  TempDir dir;
  write_model(dir);
  // A length of 0x0000'0000'0123'4567 in a 20-byte file.
  std::string bytes = "\x67\x45\x23\x01";
  bytes += std::string(16, '\0');
  write_file(dir.file("model.safetensors"), bytes);
  const Error e = open_error(dir.path().string());
  EXPECT_EQ(e.kind(), ErrorKind::kHeaderLength) << e.what();
  EXPECT_EQ(std::string(e.what()).find(std::to_string(0x01234567)), std::string::npos) << e.what();
  EXPECT_EQ(e.found(), "more than 12");
}

TEST(HostileInput, AnInvalidUtf8ByteIsNotPrinted) {
  const Error e = open_error_with_header("{\"\xfe\": 1}");
  EXPECT_EQ(e.kind(), ErrorKind::kHeaderUtf8) << e.what();
  EXPECT_EQ(std::string(e.what()).find("0xfe"), std::string::npos) << e.what();
  EXPECT_EQ(e.found(), "an invalid UTF-8 sequence at file offset 10");
}

TEST(HostileInput, AHeaderThatIsNotJsonIsNotQuoted) {
  const Error e = open_error_with_header("{\"hunter2-secret-value");
  EXPECT_EQ(e.kind(), ErrorKind::kHeaderJson) << e.what();
  expect_no_secret(e);
}

TEST(HostileInput, AConfigLinkToAnotherFileLeaksNoBytes) {
  TempDir secret;
  write_file(secret.file("token"), "\"hunter2-secret-value\n");
  write_file(secret.file("shadow"), kSecret);
  for (const char* target : {"token", "shadow"}) {
    TempDir dir;
    write_model(dir);
    std::filesystem::remove(dir.file("config.json"));
    std::filesystem::create_symlink(secret.file(target), dir.file("config.json"));
    const Error e = open_error(dir.path().string());
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.file(), dir.file("config.json"));
    expect_no_secret(e);
  }
}

TEST(HostileInput, DeeplyNestedConfigAndIndexAreErrors) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  for (const auto& [file, kind] : {std::pair{"config.json", ErrorKind::kConfig},
                                   std::pair{"model.safetensors.index.json", ErrorKind::kIndex}}) {
    TempDir dir;
    write_model(dir);
    write_file(dir.file(file), deep);
    const Error e = open_error(dir.path().string());
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(e.message(), "JSON nested too deeply") << file;
  }
}

TEST(HostileInput, AFifoConfigIsAnErrorNotAHang) {
  TempDir dir;
  write_model(dir);
  std::filesystem::remove(dir.file("config.json"));
  ASSERT_EQ(::mkfifo(dir.file("config.json").c_str(), 0600), 0);
  const Error e = open_error(dir.path().string());
  EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
  EXPECT_EQ(e.message(), "cannot read config.json: not a regular file");
}

TEST(HostileInput, AFifoNamedAsAFileIsAnErrorNotAHang) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("model.safetensors").c_str(), 0600), 0);
  const Error e = open_error(dir.file("model.safetensors"));
  EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
  EXPECT_EQ(e.message(), "not a regular file") << e.what();
}

}  // namespace
}  // namespace shardload
