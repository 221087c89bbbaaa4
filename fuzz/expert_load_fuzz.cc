// libFuzzer target: arbitrary bytes as load statistics (`eplb --load`, POST /rebalance). Row
// lengths are checked against the layout later (EplbInput), not by the reader, so only "parses or
// throws Error" is checked here.
#include "json_fuzz.h"
#include "shardload/eplb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(
      data, size, [](std::string_view text) { (void)shardload::parse_expert_load(text); });
  return 0;
}
