// The support matrix asks the code that decides: make-tiny's generator (which formats a family has
// checkpoints in), the planner (which it can lay out) and check_engine_plan (which an engine target
// takes). A list kept by hand would drift from all three.
#include <algorithm>
#include <cctype>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "shard/config_plan.h"
#include "shardload/error.h"
#include "shardload/support.h"
#include "shardload/tiny.h"
#include "tiny/tiny_quant.h"

namespace shardload {
namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A refusal's message without its details, and with the family's name (some messages carry it) as
// "the family": otherwise each row would have a note of its own for what is one reason.
std::optional<std::string> refusal(const std::string& family,
                                   const std::function<void()>& attempt) {
  try {
    attempt();
  } catch (const Error& e) {
    std::string message = e.message();
    for (size_t at = message.find(family); at != std::string::npos;
         at = message.find(family, at + 1)) {
      const size_t end = at + family.size();
      if ((at > 0 && is_name_char(message[at - 1])) ||
          (end < message.size() && is_name_char(message[end])))
        continue;
      message.replace(at, family.size(), "the family");
    }
    return message;
  }
  return std::nullopt;
}

// The family's plan in `quant`: its make-tiny config (every decoder layer MoE when asked) planned
// at tp 1, or why there is none.
struct Variant {
  std::optional<Plan> plan;
  std::string why_not;
};

Variant plan_variant(const std::string& family, const std::string& quant, bool every_layer_moe) {
  Variant out;
  const std::optional<std::string> why = refusal(family, [&] {
    const TinyOptions options{.arch = family, .quant = quant, .every_layer_moe = every_layer_moe};
    out.plan = plan_from_config(make_tiny_config(options), ParallelConfig{},
                                [](std::string_view) { return false; });
  });
  if (why) out.why_not = *why;
  return out;
}

void add_reason(std::vector<std::string>& reasons, const std::string& reason) {
  if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
}

// The first attempt the target accepts, in order of preference: the plain use before the
// post-processed export, the family's default model before its every-layer-MoE one.
SupportCell target_cell(const std::string& family, const SupportTarget& target,
                        const std::vector<const Plan*>& plans) {
  std::vector<EngineUse> uses = {target.use};
  if (target.use == EngineUse::kExport) uses.push_back(EngineUse::kExportPostProcessed);
  SupportCell cell;
  std::string plain_last;
  for (const EngineUse use : uses) {
    for (const Plan* plan : plans) {
      const std::optional<std::string> why =
          refusal(family, [&] { check_engine_plan(*plan, target.engine, use); });
      if (!why) {
        cell.yes = true;
        return cell;
      }
      add_reason(cell.reasons, *why);
      if (use == target.use) plain_last = *why;
    }
  }
  // Refused every way: the plain use's last reason is the one left once the others are worked
  // around (the post-processed export's own refusal says only that it is SGLang's).
  cell.reasons = {plain_last};
  return cell;
}

FormatSupport format_support(const std::string& family, const std::string& quant) {
  FormatSupport out{.format = quant == "none" ? "bf16" : quant};
  Variant plain = plan_variant(family, quant, false);
  if (!plain.plan) {
    out.loads.reasons = {plain.why_not};
    return out;
  }
  out.loads.yes = true;
  // A dense family has no every-layer-MoE model (make-tiny refuses it): its default is the only
  // one.
  Variant every_moe = plan_variant(family, quant, true);
  std::vector<const Plan*> plans = {&*plain.plan};
  if (every_moe.plan) plans.push_back(&*every_moe.plan);
  for (const SupportTarget& target : kSupportTargets)
    out.targets.push_back(target_cell(family, target, plans));
  return out;
}

}  // namespace

std::string support_target_label(const SupportTarget& target) {
  const std::string engine = target.engine == Engine::kVllm ? "vLLM"
                             : target.engine == Engine::kSglang
                                 ? "SGLang"
                                 : std::string(engine_name(target.engine));
  return engine + (target.use == EngineUse::kHooks ? " hooks" : " export");
}

std::vector<FamilySupport> support_matrix() {
  std::vector<FamilySupport> out;
  for (const std::string& family : tiny_architectures()) {
    FamilySupport& row = out.emplace_back(FamilySupport{.family = family});
    for (const std::string& quant : tiny::quant_names())
      row.formats.push_back(format_support(family, quant));
  }
  return out;
}

}  // namespace shardload
