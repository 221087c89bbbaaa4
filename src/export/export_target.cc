// Where an export may go: never into the checkpoint it is made from (a later load of the checkpoint
// would find the export's rank files and manifest there), nor around it (--overwrite would replace
// the checkpoint).
#include <filesystem>

#include <fmt/format.h>

#include "export/resolved_path.h"
#include "shardload/error.h"
#include "shardload/export.h"

namespace shardload {

namespace fs = std::filesystem;

fs::path resolved_path(const std::string& path) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec)
    throw Error(ErrorKind::kIo, fmt::format("cannot resolve the path: {}", ec.message()),
                {.file = path});
  out = out.lexically_normal();
  if (out.has_parent_path() && out.filename().empty()) out = out.parent_path();
  return out;
}

namespace {

// Whether `path` is `dir` or lies under it (compared component by component, not as strings: /a/bc
// is not under /a/b).
bool is_within(const fs::path& path, const fs::path& dir) {
  auto [d, p] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return d == dir.end();
}

}  // namespace

void check_export_target(const std::string& model, const ExportOptions& options) {
  if (options.out.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "no output directory", {.field = "--out"});
  }
  const fs::path out = resolved_path(options.out);
  const fs::path model_path = resolved_path(model);
  std::error_code ec;
  // A single .safetensors file: its directory is where a load of the model looks.
  const fs::path model_dir =
      fs::is_directory(model_path, ec) ? model_path : model_path.parent_path();
  if (is_within(out, model_dir)) {
    throw Error(ErrorKind::kInvalidArgument, "the output directory is inside the model directory",
                {.file = options.out,
                 .field = "--out",
                 .expected = fmt::format("a directory outside {}", model_dir.string()),
                 .found = out.string()});
  }
  if (is_within(model_path, out)) {
    throw Error(ErrorKind::kInvalidArgument, "the model is inside the output directory",
                {.file = options.out,
                 .field = "--out",
                 .expected = fmt::format("a directory that does not hold {}", model_path.string()),
                 .found = out.string()});
  }
  const fs::file_status status = fs::symlink_status(out, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status)) {
    throw Error(ErrorKind::kInvalidArgument, "the output path exists and is not a directory",
                {.file = options.out, .field = "--out"});
  }
  if (!options.overwrite && !fs::is_empty(out, ec)) {
    throw Error(ErrorKind::kInvalidArgument, "the output directory is not empty (use --overwrite)",
                {.file = options.out, .field = "--out"});
  }
}

}  // namespace shardload
