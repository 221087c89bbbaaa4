// libFuzzer target: arbitrary bytes as the body of POST /update_weights_from_disk and of
// POST /rebalance, parsed as the weight server parses them before anything else happens.
#include "json_fuzz.h"
#include "serve/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(data, size, [](std::string_view body) {
    const shardload::serve::UpdateRequest update = shardload::serve::parse_update_request(body);
    shardload::fuzz::check(!update.model_path.empty());
  });
  shardload::fuzz::parse_or_error(data, size, [](std::string_view body) {
    const shardload::serve::RebalanceRequest rebalance =
        shardload::serve::parse_rebalance_request(body);
    shardload::fuzz::check(rebalance.physical_to_logical_map.has_value() !=
                           rebalance.expert_load.has_value());
  });
  return 0;
}
