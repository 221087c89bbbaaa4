#include "model/arch_table.h"

namespace shardload::arch {

const ArchTable& table_for(Family family) {
  switch (family) {
    case Family::kLlama: return llama_table();
    case Family::kQwen2: return qwen2_table();
    case Family::kQwen3: return qwen3_table();
    case Family::kQwen2Moe: return qwen2_moe_table();
    case Family::kQwen3Moe: return qwen3_moe_table();
    case Family::kMixtral: return mixtral_table();
    case Family::kDeepseekV2: return deepseek_v2_table();
    case Family::kDeepseekV3: return deepseek_v3_table();
    case Family::kErnie45Moe: return ernie4_5_moe_table();
  }
  return llama_table();
}

}  // namespace shardload::arch
