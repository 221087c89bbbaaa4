#pragma once

#include <regex.h>

#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "shardload/reload.h"

namespace shardload::reload {

// A WeightFilter with its regex compiled once per update (the filter runs on every checkpoint
// name).
class CompiledFilter {
 public:
  explicit CompiledFilter(const WeightFilter& filter);
  bool selects(std::string_view name) const { return match(name) != Match::kNone; }

  // How a name is selected: by name (an empty filter, a substring or the regex: its modules are
  // reloaded whole) or by its expert alone (only the slots that expert fills are rewritten).
  enum class Match { kNone, kExpert, kName };
  Match match(std::string_view name) const;

 private:
  struct RegexFree {
    void operator()(regex_t* r) const {
      regfree(r);
      delete r;
    }
  };
  const WeightFilter& filter_;
  // POSIX extended regex (libc): std::regex trips GCC 12's -Wmaybe-uninitialized under the
  // sanitizers.
  std::unique_ptr<regex_t, RegexFree> regex_;
  std::set<std::pair<int, int>> experts_;
};

// (decoder layer, expert) of a routed-expert tensor name such as
// model.layers.3.mlp.experts.17.up_proj.weight (also block_sparse_moe.experts.N.w1 and ERNIE's
// mlp.experts.N); nullopt for every other name.
std::optional<std::pair<int, int>> expert_of(std::string_view name);

}  // namespace shardload::reload
