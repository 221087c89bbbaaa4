// libFuzzer target: arbitrary bytes as an export's shardload.json, read and checked as load_export
// does before it opens any rank file (the directory may be anyone's).
#include "core/json_input.h"
#include "export/export_checks.h"
#include "json_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardload::fuzz::parse_or_error(data, size, [](std::string_view text) {
    const nlohmann::json manifest = shardload::parse_json(
        text, shardload::ErrorKind::kConfig, "shardload.json", shardload::kDataJsonLimits);
    const shardload::ExportManifest checked = shardload::check_manifest(manifest, "shardload.json");
    shardload::fuzz::check(checked.tp >= 1 &&
                           checked.files.size() == static_cast<size_t>(checked.tp));
  });
  return 0;
}
