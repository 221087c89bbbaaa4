// libFuzzer target: arbitrary bytes as an --expert-map file.
#include "json_fuzz.h"
#include "shardload/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    for (const std::vector<int>& row : shardload::parse_expert_map_text(text, "map.json")) {
      for (int expert : row) shardload::fuzz::check(expert >= 0);
    }
  });
  return 0;
}
