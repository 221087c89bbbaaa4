// The engines' flags that stand for several layout fields at once, in one place for the command line
// and the Python package.
#include <fmt/format.h>

#include "shardload/error.h"
#include "shardload/plan.h"

namespace shardload {
namespace {

[[noreturn]] void invalid_flags(std::string message) {
  throw Error(ErrorKind::kInvalidArgument, std::move(message));
}

}  // namespace

void apply_engine_flags(const EngineLayoutFlags& flags, ParallelConfig& config) {
  const int tp = config.tp;
  if (flags.enable_expert_parallel) {
    if (flags.ep_given && config.ep != tp) {
      invalid_flags(fmt::format("--enable-expert-parallel means --ep {} (the --tp), not --ep {}", tp, config.ep));
    }
    config.ep = tp;
  }
  if (flags.moe_a2a_backend == "deepep") {
    if (flags.ep_given && config.ep != tp) {
      invalid_flags(fmt::format("--moe-a2a-backend deepep means --ep {} (the --tp), not --ep {}", tp, config.ep));
    }
    config.ep = tp;
    config.split_shared_experts = false;
  } else if (flags.moe_a2a_backend != "none") {
    invalid_flags(fmt::format("--moe-a2a-backend {}: only none or deepep", flags.moe_a2a_backend));
  }
  if (flags.moe_dense_tp_size) {
    const int size = *flags.moe_dense_tp_size;
    if (size != 1 && size != tp) {
      invalid_flags(fmt::format(
          "--moe-dense-tp-size {}: only 1 (dense MLPs replicated) or the --tp {} is supported, as in SGLang",
          size, tp));
    }
    config.replicate_dense_mlp = size == 1 && tp > 1;
  }
}

}  // namespace shardload
