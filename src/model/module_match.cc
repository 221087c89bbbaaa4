#include "model/module_match.h"

#include <re2/re2.h>

#include <memory>
#include <mutex>
#include <unordered_map>

namespace shardload {
namespace {

constexpr std::string_view kRegexPrefix = "re:";

// One compiled pattern per distinct entry: a MoE checkpoint asks about tens of thousands of modules.
// Bounded, since a long-running server reads the configs of every update: past kMaxPatterns distinct
// patterns the cache starts again (callers hold shared pointers, so nothing they use goes away).
constexpr size_t kMaxPatterns = 1024;

std::shared_ptr<const RE2> compiled(std::string_view pattern) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const RE2>> cache;
  const std::lock_guard lock(mutex);
  const auto it = cache.find(std::string(pattern));
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxPatterns) cache.clear();
  RE2::Options options;
  options.set_log_errors(false);
  // re.match anchors at the start only.
  auto re = std::make_shared<const RE2>("^(?:" + std::string(pattern) + ")", options);
  cache.emplace(std::string(pattern), re);
  return re;
}

}  // namespace

bool module_matches(std::string_view entry, std::string_view module) {
  if (entry == "Linear") return true;
  if (!entry.starts_with(kRegexPrefix)) return entry == module;
  const std::shared_ptr<const RE2> re = compiled(entry.substr(kRegexPrefix.size()));
  return re->ok() && RE2::PartialMatch(re2::StringPiece(module.data(), module.size()), *re);
}

std::string module_entry_error(std::string_view entry) {
  if (!entry.starts_with(kRegexPrefix)) return {};
  const std::shared_ptr<const RE2> re = compiled(entry.substr(kRegexPrefix.size()));
  return re->ok() ? std::string{} : re->error();
}

}  // namespace shardload
