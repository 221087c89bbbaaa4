// The names of the layout choices, both ways, from the tables in shardload/plan.h.
#include <optional>
#include <string_view>

#include "shardload/plan.h"

namespace shardload {
namespace {

template <typename T, size_t N>
std::string_view name_in(const std::pair<T, const char*> (&table)[N], T value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

template <typename T, size_t N>
std::optional<T> value_in(const std::pair<T, const char*> (&table)[N], std::string_view name) {
  for (const auto& [v, n] : table) {
    if (name == n) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string_view row_bias_name(RowBias row_bias) { return name_in(kRowBiasNames, row_bias); }
std::string_view scope_name(Scope scope) { return name_in(kScopeNames, scope); }
std::string_view dp_style_name(DpStyle style) { return name_in(kDpStyleNames, style); }

std::optional<RowBias> row_bias_from_name(std::string_view name) { return value_in(kRowBiasNames, name); }
std::optional<Scope> scope_from_name(std::string_view name) { return value_in(kScopeNames, name); }
std::optional<DpStyle> dp_style_from_name(std::string_view name) { return value_in(kDpStyleNames, name); }

}  // namespace shardload
