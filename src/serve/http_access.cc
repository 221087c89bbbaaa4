#include "serve/http_access.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>

#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload {
namespace {

bool parse_ipv4(const std::string& host, in_addr& out) {
  return inet_pton(AF_INET, host.c_str(), &out) == 1;
}

bool parse_ipv6(const std::string& host, in6_addr& out) {
  return inet_pton(AF_INET6, host.c_str(), &out) == 1;
}

}  // namespace

bool is_valid_host(std::string_view host) {
  const std::string text(host);
  in_addr v4{};
  in6_addr v6{};
  return text == "localhost" || parse_ipv4(text, v4) || parse_ipv6(text, v6);
}

bool is_loopback_host(std::string_view host) {
  const std::string text(host);
  in_addr v4{};
  in6_addr v6{};
  if (text == "localhost") return true;
  if (parse_ipv4(text, v4)) return (ntohl(v4.s_addr) >> 24) == 127;
  if (parse_ipv6(text, v6)) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

namespace serve {

bool bearer_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "bearer ";
  if (key.empty() || authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  const std::string_view given = authorization.substr(kScheme.size());
  // Every byte of the key is looked at whatever the guess; a length mismatch only sets a bit.
  unsigned difference = given.size() == key.size() ? 0U : 1U;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char guess = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    difference |= guess ^ static_cast<unsigned char>(key[i]);
  }
  return difference == 0;
}

std::string random_api_key() {
  std::array<unsigned char, 32> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(ErrorKind::kIo, fmt::format("no random bytes for the API key: {}", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  std::string key;
  for (const unsigned char b : bytes) key += fmt::format("{:02x}", b);
  return key;
}

}  // namespace serve
}  // namespace shardload
