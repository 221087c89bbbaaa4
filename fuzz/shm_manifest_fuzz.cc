// libFuzzer target: arbitrary bytes as /dev/shm/shardload-NAME/manifest.json, which a restarting
// server reads and compares with the layout it is asked to serve (anyone able to write the file,
// or a crash mid-write, decides its bytes).
#include "json_fuzz.h"
#include "serve/manifest.h"
#include "serve/shm_reuse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const shardload::Plan plan;
  // A node of a server on several nodes: its manifest's node fields are compared too.
  static const shardload::serve::NodeScope node{.node = 1, .nodes = 2, .held = {}};
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    std::string why;
    const std::optional<nlohmann::json> manifest =
        shardload::serve::parse_manifest_text(text, &why);
    shardload::fuzz::check(manifest.has_value() != !why.empty());
    if (!manifest) return;
    (void)shardload::serve::manifest_expert_map(*manifest);
    (void)shardload::serve::reuse_obstacle(*manifest, {}, plan, "/model", {}, {});
    (void)shardload::serve::reuse_obstacle(*manifest, {}, plan, "/model", {}, node);
  });
  return 0;
}
