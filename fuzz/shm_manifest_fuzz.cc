// libFuzzer target: arbitrary bytes as /dev/shm/shardload-NAME/manifest.json, which a restarting
// server reads and compares with the layout it is asked to serve (anyone able to write the file,
// or a crash mid-write, decides its bytes).
#include "core/json_input.h"
#include "json_fuzz.h"
#include "serve/shm_reuse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const shardload::Plan plan;
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    const nlohmann::json manifest = shardload::parse_json(
        text, shardload::ErrorKind::kIo, "manifest.json", shardload::kDataJsonLimits);
    if (!manifest.is_object()) return;
    (void)shardload::serve::manifest_expert_map(manifest);
    (void)shardload::serve::reuse_obstacle(manifest, {}, plan, "/model");
  });
  return 0;
}
