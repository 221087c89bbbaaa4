#include "cli/export_note.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/usage_error.h"
#include "shardload/export.h"

namespace shardload::cli {

std::string describe_export(const std::string& dir) {
  const nlohmann::json manifest = read_export_manifest(dir);
  // Only short printable scalars are shown: a hostile manifest cannot break the line or flood it.
  auto field = [&](const char* name) {
    const auto it = manifest.find(name);
    if (it == manifest.end() || it->is_structured()) return std::string("?");
    const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
    const bool printable =
        std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    return printable && text.size() <= 64 ? text : std::string("?");
  };
  return fmt::format("a shardload export of {} (tp={} ep={} moe_tp={}, {}, quantization {})",
                     field("architecture"), field("tp_size"), field("ep_size"),
                     field("moe_tp_size"), field("dtype"), field("quantization"));
}

void refuse_export_as_checkpoint(const std::string& path, const char* command) {
  if (!is_export_dir(path)) return;
  throw UsageError(fmt::format(
      "{} is {}, not a checkpoint: `shardload load {}` loads it as it is; `shardload {}` takes the "
      "checkpoint it was made from",
      path, describe_export(path), path, command));
}

}  // namespace shardload::cli
