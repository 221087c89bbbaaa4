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

std::span<const Family* const> families() {
  static const Family* const kFamilies[] = {
      &llama_family(),        &qwen2_family(),    &qwen3_family(),       &qwen2_moe_family(),
      &qwen3_moe_family(),    &mixtral_family(),  &deepseek_v2_family(), &deepseek_v3_family(),
      &deepseek_v32_family(), &ernie4_5_moe_family(), &glm4_moe_family(),
      &minimax_m2_family(),   &qwen3_next_family(),   &llama4_family(),   &gpt_oss_family(),
      &glm4_moe_lite_family(), &glm_moe_dsa_family(),
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

}  // namespace shardload::arch
