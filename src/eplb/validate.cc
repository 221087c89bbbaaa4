// Every precondition is checked up front, so that a bad request fails with a message and never
// half-way through a placement (the reference only asserts).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "shardload/eplb.h"
#include "shardload/error.h"

namespace shardload {
namespace {

[[noreturn]] void invalid(std::string message) {
  throw Error(ErrorKind::kInvalidArgument, std::move(message));
}

void check_positive(const char* name, int value) {
  if (value < 1) invalid(fmt::format("{} {} must be at least 1", name, value));
}

void check_loads(const std::vector<std::vector<double>>& load) {
  if (load.empty()) invalid("expert_load has no layers (expected at least one row)");
  const size_t experts = load[0].size();
  if (experts == 0) invalid("expert_load layer 0 has no experts");
  if (experts > static_cast<size_t>(kEplbMaxReplicas)) {
    invalid(fmt::format("expert_load has {} experts per layer, more than the limit {}", experts,
                        kEplbMaxReplicas));
  }
  for (size_t l = 0; l < load.size(); ++l) {
    if (load[l].size() != experts) {
      invalid(
          fmt::format("expert_load rows of unequal length: layer {} has {} experts, layer 0 has {}",
                      l, load[l].size(), experts));
    }
    for (size_t e = 0; e < experts; ++e) {
      const double v = load[l][e];
      if (!std::isfinite(v))
        invalid(fmt::format("expert_load[{}][{}] = {} is not finite", l, e, v));
      if (v < 0) invalid(fmt::format("expert_load[{}][{}] = {} is negative", l, e, v));
      // Converting an out-of-range double to float is undefined; the reference would see inf.
      if (v > static_cast<double>(std::numeric_limits<float>::max())) {
        invalid(fmt::format("expert_load[{}][{}] = {} is beyond the float32 range", l, e, v));
      }
    }
  }
}

}  // namespace

bool eplb_is_hierarchical(const EplbInput& input) {
  return input.nodes > 0 && input.groups % input.nodes == 0;
}

void validate_eplb_input(const EplbInput& input) {
  check_loads(input.load);
  check_positive("replicas", input.replicas);
  check_positive("groups", input.groups);
  check_positive("nodes", input.nodes);
  check_positive("gpus", input.gpus);
  const int experts = static_cast<int>(input.load[0].size());
  const int p = input.replicas;
  if (p > kEplbMaxReplicas)
    invalid(fmt::format("replicas {} exceeds the limit {}", p, kEplbMaxReplicas));
  if (p % input.gpus != 0)
    invalid(fmt::format("replicas {} is not a multiple of gpus {}", p, input.gpus));
  if (p < experts)
    invalid(fmt::format("replicas {} is fewer than the {} logical experts", p, experts));
  if (!eplb_is_hierarchical(input))
    return;  // the global policy uses G = N = 1, which divide anything
  if (input.gpus % input.nodes != 0) {
    invalid(fmt::format(
        "gpus {} is not a multiple of nodes {} (hierarchical policy: groups {} divisible "
        "by nodes {})",
        input.gpus, input.nodes, input.groups, input.nodes));
  }
  if (experts % input.groups != 0) {
    invalid(
        fmt::format("experts {} is not a multiple of groups {} (hierarchical policy: groups {} "
                    "divisible by nodes {})",
                    experts, input.groups, input.groups, input.nodes));
  }
}

}  // namespace shardload
