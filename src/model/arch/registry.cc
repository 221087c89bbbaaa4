// The registered families: each defined in its own file (src/model/arch/<family>.cc), listed here
// once. The order is make-tiny's --arch list and the order of inspect's expert-count spellings.
#include "model/arch/family.h"

namespace shardload::arch {

const Family& llama_family();
const Family& qwen2_family();
const Family& qwen3_family();
const Family& qwen2_moe_family();
const Family& qwen3_moe_family();
const Family& mixtral_family();
const Family& deepseek_v2_family();
const Family& deepseek_v3_family();
const Family& deepseek_v32_family();
const Family& ernie4_5_moe_family();
const Family& glm4_moe_family();
const Family& minimax_m2_family();
const Family& llama4_family();
const Family& gpt_oss_family();
const Family& qwen3_next_family();
const Family& glm4_moe_lite_family();
const Family& glm_moe_dsa_family();
const Family& qwen3_5_family();
const Family& qwen3_5_moe_family();
const Family& gemma4_family();
const Family& kimi_k25_family();
const Family& deepseek_v4_family();

std::span<const Family* const> families() {
  static const Family* const kFamilies[] = {
      &llama_family(),        &qwen2_family(),    &qwen3_family(),       &qwen2_moe_family(),
      &qwen3_moe_family(),    &mixtral_family(),  &deepseek_v2_family(), &deepseek_v3_family(),
      &deepseek_v32_family(), &ernie4_5_moe_family(), &glm4_moe_family(),
      &minimax_m2_family(),   &qwen3_next_family(),   &llama4_family(),   &gpt_oss_family(),
      &glm4_moe_lite_family(), &glm_moe_dsa_family(),
      &qwen3_5_family(),      &qwen3_5_moe_family(),   &gemma4_family(),
      &kimi_k25_family(),      &deepseek_v4_family(),
  };
  return kFamilies;
}

const Family* find_family(std::string_view name) {
  for (const Family* family : families()) {
    if (family->name == name) return family;
  }
  return nullptr;
}

const Family* family_for_architecture(std::string_view architecture) {
  for (const Family* family : families()) {
    for (std::string_view known : family->architectures) {
      if (known == architecture) return family;
    }
  }
  return nullptr;
}

const ArchTable& table_for(const Family* family) { return family->table(); }

std::string checkpoint_name(const Family& family, std::string_view weight_prefix, std::string_view text_name) {
  const std::string_view replaced = family.multimodal_replaced_prefix;
  if (weight_prefix.empty() || !text_name.starts_with(replaced)) return std::string(text_name);
  text_name.remove_prefix(replaced.size());
  std::string name;
  name.reserve(weight_prefix.size() + text_name.size());
  return name.append(weight_prefix).append(text_name);
}

std::optional<std::string> text_model_name(const Family& family, std::string_view weight_prefix,
                                           std::string_view name) {
  const std::string_view replaced = family.multimodal_replaced_prefix;
  if (weight_prefix.empty()) return std::string(name);
  if (name.starts_with(weight_prefix)) {
    name.remove_prefix(weight_prefix.size());
    return std::string(replaced).append(name);
  }
  // Under the replaced prefix but not the text model's: another tower (model.visual.*); outside it, a
  // text-model name of its own (lm_head, mtp.*). Without a replaced prefix every name is under it.
  if (name.starts_with(replaced)) return std::nullopt;
  return std::string(name);
}

}  // namespace shardload::arch
