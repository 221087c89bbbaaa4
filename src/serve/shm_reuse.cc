#include "serve/shm_reuse.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "serve/manifest.h"
#include "serve/shm_layout.h"
#include "serve/source_identity.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {
namespace {

// Paths compare by what they name, so "./m" and "/abs/m" are the same model.
std::string canonical(const std::string& path) {
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
  return error ? path : resolved.string();
}

// GCC 12 at -O2/-O3 reports a false -Warray-bounds inside nlohmann::json's operator== when it is
// inlined here (the same comparison is clean under -O1 and with the sanitizers); the comparison
// itself is plain.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
template <typename T>
bool member_equals(const nlohmann::json& manifest, const char* key, const T& value) {
  const auto it = manifest.find(key);
  return it != manifest.end() && *it == nlohmann::json(value);
}
#pragma GCC diagnostic pop

}  // namespace

std::optional<std::vector<std::vector<int>>> manifest_expert_map(const nlohmann::json& manifest) {
  const auto it = manifest.find("physical_to_logical_map");
  if (it == manifest.end()) return std::nullopt;
  try {
    return parse_expert_map(*it);
  } catch (const Error&) {
    return std::nullopt;  // a damaged manifest: not reused
  }
}

std::string reuse_obstacle(const nlohmann::json& manifest, const std::vector<ShmRankFile>& files,
                           const Plan& plan, const std::string& model_path,
                           const CheckpointIdentity& identity, const NodeScope& scope) {
  for (size_t i = 0; i < files.size(); ++i) {
    const size_t r = static_cast<size_t>(scope.held.first) + i;
    if (!has_magic(files[i].header())) return fmt::format("rank {} has no {} header", r, kShmMagic);
    if (load_sequence(files[i].header()) % 2 != 0) {
      return fmt::format("sequence word of rank {} is odd (killed during a commit)", r);
    }
    if (load_update_in_progress(files[i].header())) {
      return fmt::format("header of rank {} says an update was in progress (killed during it)", r);
    }
  }
  // Anything but an explicit false (a damaged or tampered manifest included) is not a clean stop.
  const auto in_progress = manifest.find("update_in_progress");
  if (in_progress != manifest.end() && (!in_progress->is_boolean() || in_progress->get<bool>())) {
    return "the manifest says an update was in progress when the server stopped";
  }
  if (member_equals(manifest, "format", kShmDoubleBufferFormat)) {
    return "the directory holds a double-buffered server's two slots per rank (this server keeps one)";
  }
  if (!member_equals(manifest, "format", kShmManifestFormat)) {
    return fmt::format("manifest format is not {}", kShmManifestFormat);
  }
  const auto path = manifest.find("model_path");
  if (path == manifest.end() || !path->is_string() ||
      canonical(path->get<std::string>()) != canonical(model_path)) {
    return fmt::format("manifest model_path {} is not {}",
                       path == manifest.end() ? "(none)" : path->dump(), model_path);
  }
  // The manifest's model_path is the last update's checkpoint; after a filtered (or incomplete)
  // one, the bytes of earlier checkpoints are still live: every source must be this checkpoint.
  const auto sources = manifest.find("sources");
  if (sources == manifest.end() || !sources->is_array() || sources->empty()) {
    return "manifest does not say where the live bytes come from (no sources)";
  }
  for (const nlohmann::json& source : *sources) {
    const auto from = source.is_object() ? source.find("model_path") : source.end();
    if (!source.is_object() || from == source.end() || !from->is_string()) {
      return "manifest sources are not a list of {model_path}";
    }
    if (canonical(from->get<std::string>()) != canonical(model_path)) {
      return fmt::format("the live bytes are not all {}: an update since the last whole one came "
                         "from {}",
                         model_path, from->dump());
    }
    if (source.contains("incomplete")) {
      return "an update of the live bytes stopped between its commit groups";
    }
    // The same path may name other bytes today: a link pointed elsewhere (latest -> step-N), a
    // file replaced or rewritten in place.
    const std::string changed = identity_difference(source, identity);
    if (!changed.empty()) return "the checkpoint is not the one the live bytes were read from: " + changed;
  }
  if (!member_equals(manifest, "tp_size", plan.parallel.tp) ||
      !member_equals(manifest, "ep_size", plan.parallel.ep)) {
    return fmt::format("manifest layout is not tp={} ep={}", plan.parallel.tp, plan.parallel.ep);
  }
  nlohmann::json dp_fields = nlohmann::json::object();
  add_dp_fields(plan.parallel, dp_fields);
  for (const char* field : {"dp_size", "attn_tp_size", "dp_style", "scopes"}) {
    const auto it = manifest.find(field);
    const nlohmann::json found = it == manifest.end() ? nlohmann::json() : *it;
    const auto want = dp_fields.find(field);
    if (found != (want == dp_fields.end() ? nlohmann::json() : *want)) {
      return fmt::format("manifest {} differs from the requested layout's", field);
    }
  }
  const auto version = manifest.find("version");
  if (version == manifest.end() || !version->is_number_unsigned()) {
    return "manifest version is not an unsigned integer";
  }
  // Compared as ints, not as json: GCC 12 at -O2 sees a false -Warray-bounds in
  // json(vector<vector<int>>).
  if (manifest_expert_map(manifest) != plan.physical_to_logical) {
    return "manifest physical_to_logical_map differs from the requested one";
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const size_t r = static_cast<size_t>(scope.held.first) + i;
    const uint64_t want = kShmHeaderBytes + plan.ranks[r].bytes;
    if (files[i].file_bytes() != want) {
      return fmt::format("rank {} file has {} bytes, the layout needs {}", r, files[i].file_bytes(),
                         want);
    }
  }
  if (scope.nodes > 1 &&
      (!member_equals(manifest, "node", scope.node) || !member_equals(manifest, "nodes", scope.nodes))) {
    return fmt::format("manifest is not that of node {} of {}", scope.node, scope.nodes);
  }
  if (!member_equals(manifest, "ranks", manifest_ranks(plan, scope.held))) {
    return "manifest tensor table differs from this model's layout";
  }
  return {};
}

}  // namespace shardload::serve
