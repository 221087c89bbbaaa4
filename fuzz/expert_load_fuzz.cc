// libFuzzer target: arbitrary bytes as load statistics (`eplb --load`, POST /rebalance).
#include "json_fuzz.h"
#include "shardload/eplb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    const std::vector<std::vector<double>> load = shardload::parse_expert_load(text);
    for (const std::vector<double>& row : load)
      shardload::fuzz::check(row.size() == load[0].size());
  });
  return 0;
}
