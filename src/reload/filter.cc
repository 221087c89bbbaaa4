#include "reload/filter.h"

#include <fmt/format.h>

#include <charconv>

#include "shardload/error.h"

namespace shardload {
namespace reload {
namespace {

// The number that follows `key` (e.g. "layers.") right after a dot or at the start, up to the next
// dot.
std::optional<int> number_after(std::string_view name, std::string_view key, size_t from,
                                size_t* end) {
  for (size_t at = name.find(key, from); at != std::string_view::npos;
       at = name.find(key, at + 1)) {
    if (at != 0 && name[at - 1] != '.') continue;
    const char* first = name.data() + at + key.size();
    const char* last = name.data() + name.size();
    int value = 0;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || ptr == first || (ptr != last && *ptr != '.')) continue;
    *end = static_cast<size_t>(ptr - name.data());
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::pair<int, int>> expert_of(std::string_view name) {
  size_t end = 0;
  const std::optional<int> layer = number_after(name, "layers.", 0, &end);
  if (!layer) return std::nullopt;
  const std::optional<int> expert = number_after(name, "experts.", end, &end);
  if (!expert) return std::nullopt;
  return std::make_pair(*layer, *expert);
}

CompiledFilter::CompiledFilter(const WeightFilter& filter)
    : filter_(filter), experts_(filter.experts.begin(), filter.experts.end()) {
  if (!filter.regex.empty()) {
    auto compiled = std::make_unique<regex_t>();
    const int rc = regcomp(compiled.get(), filter.regex.c_str(), REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char text[256];
      regerror(rc, compiled.get(), text, sizeof text);
      throw Error(ErrorKind::kInvalidArgument, fmt::format("invalid weight name regex: {}", text),
                  {.field = "regex",
                   .expected = "a POSIX extended regular expression",
                   .found = filter.regex});
    }
    regex_.reset(compiled.release());
  }
}

CompiledFilter::Match CompiledFilter::match(std::string_view name) const {
  if (filter_.selects_all()) return Match::kName;
  for (const std::string& part : filter_.substrings) {
    if (name.find(part) != std::string_view::npos) return Match::kName;
  }
  if (regex_ && regexec(regex_.get(), std::string(name).c_str(), 0, nullptr, 0) == 0) {
    return Match::kName;
  }
  if (!experts_.empty()) {
    const auto expert = expert_of(name);
    if (expert && experts_.count(*expert) != 0) return Match::kExpert;
  }
  return Match::kNone;
}

}  // namespace reload

bool filter_selects(const WeightFilter& filter, std::string_view name) {
  return reload::CompiledFilter(filter).selects(name);
}

}  // namespace shardload
