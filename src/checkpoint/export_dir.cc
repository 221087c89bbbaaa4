// Telling a shardload export from a checkpoint: an export's directory holds rank files (and the
// model's config.json beside them), which a checkpoint reader would take for shards without an
// index.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "shardload/checkpoint.h"
#include "shardload/error.h"

namespace shardload {

bool is_export_dir(const std::string& path) {
  const std::filesystem::path manifest = std::filesystem::path(path) / "shardload.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(manifest, ec)) return false;
  try {
    const nlohmann::json json =
        read_json_file(manifest.string(), ErrorKind::kConfig, kDataJsonLimits, "shardload.json");
    if (!json.is_object()) return false;
    // Compared as JSON values: a "format" that is not a string is another file's, not an error.
    const auto format = json.find("format");
    return format != json.end() && *format == "shardload/1";
  } catch (const Error&) {
    return false;
  }
}

}  // namespace shardload
