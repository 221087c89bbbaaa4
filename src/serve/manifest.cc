#include "serve/manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>

#include "core/json_input.h"
#include "format/posix_io.h"
#include "serve/errno_error.h"
#include "serve/shm_layout.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {

nlohmann::json manifest_ranks(const Plan& plan, NodeRanks held) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = held.first; r < held.last; ++r) {
    const RankPlan& rank = plan.ranks.at(static_cast<size_t>(r));
    nlohmann::json tensors = nlohmann::json::object();
    for (const PlanParam& param : rank.params) {
      if (!param.exported()) continue;
      tensors[param.name] = {{"dtype", dtype_name(param.dtype)},
                             {"shape", param.shape},
                             {"offset", kShmHeaderBytes + param.offset},
                             {"nbytes", param.nbytes}};
    }
    ranks.push_back({{"rank", rank.rank},
                     {"file", rank_file_name(rank.rank)},
                     {"bytes", kShmHeaderBytes + rank.bytes},
                     {"tensors", std::move(tensors)}});
  }
  return ranks;
}

nlohmann::json make_manifest(std::string_view name, const LiveModel& live, bool update_in_progress,
                             const NodeScope& scope) {
  nlohmann::json manifest = {{"format", kShmManifestFormat},
                             {"name", name},
                             {"model_path", live.model_path},
                             {"version", live.version},
                             {"tp_size", live.plan.parallel.tp},
                             {"ep_size", live.plan.parallel.ep},
                             {"physical_to_logical_map", live.plan.physical_to_logical},
                             {"update_in_progress", update_in_progress},
                             {"ranks", manifest_ranks(live.plan, scope.held)}};
  add_dp_fields(live.plan.parallel, manifest);
  if (scope.nodes > 1) {
    manifest["node"] = scope.node;
    manifest["nodes"] = scope.nodes;
    manifest["node_ranks"] = {scope.held.first, scope.held.last - 1};
  }
  return manifest;
}

void add_dp_fields(const ParallelConfig& parallel, nlohmann::json& out) {
  if (!parallel.has_dp_fields()) return;  // the plain layout's manifest stays as it was
  out["dp_size"] = parallel.dp;
  out["attn_tp_size"] = parallel.attention_tp();
  out["dp_style"] = dp_style_name(parallel.dp_style);
  out["scopes"] = scopes_json(parallel);
}

namespace {

// A temporary name no other writer uses: the pid and a counter make it unique between servers and
// within one; O_EXCL catches what is left of a killed server with the same pid.
int create_temp(const ShmDir& dir, std::string* name) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < format::kTempNameAttempts; ++attempt) {
    *name = fmt::format("{}{}-{}", kManifestTempPrefix, ::getpid(), counter++);
    const int fd = dir.create_file(*name, /*replace=*/false);
    if (fd >= 0) return fd;
  }
  throw Error(ErrorKind::kIo, "no free temporary manifest name", {.file = dir.file_path(*name)});
}

}  // namespace

void write_manifest(const ShmDir& dir, const nlohmann::json& manifest) {
  std::string temp;
  const int fd = create_temp(dir, &temp);
  const std::string text = manifest.dump(1) + "\n";
  try {
    // format's write_exact: short writes and EINTR resumed, failures an Error(kIo).
    format::write_exact(fd, std::as_bytes(std::span(text)), {.file = dir.file_path(temp)});
    if (::fsync(fd) != 0) throw errno_error("fsync of the manifest", dir.file_path(temp));
  } catch (...) {
    ::close(fd);
    ::unlinkat(dir.fd(), temp.c_str(), 0);
    throw;
  }
  ::close(fd);
  if (::renameat(dir.fd(), temp.c_str(), dir.fd(), "manifest.json") != 0) {
    const Error error = errno_error("rename to manifest.json", dir.file_path(temp));
    ::unlinkat(dir.fd(), temp.c_str(), 0);
    throw error;
  }
  // The rename itself is durable only once the directory is.
  if (::fsync(dir.fd()) != 0) throw errno_error("fsync", dir.path());
}

std::optional<nlohmann::json> read_manifest(const ShmDir& dir, std::string* why) {
  std::string open_why;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = dir.open_own_file("manifest.json", O_RDONLY | O_NONBLOCK, &open_why);
  if (fd < 0) {
    *why = "no usable manifest.json: " + open_why;
    return std::nullopt;
  }
  std::string text;
  try {
    text = read_bounded_fd(fd, dir.file_path("manifest.json"), ErrorKind::kIo, kMaxManifestBytes,
                           "manifest.json");
  } catch (const Error& e) {
    ::close(fd);
    *why = e.what();
    return std::nullopt;
  }
  ::close(fd);
  return parse_manifest_text(text, why);
}

std::optional<nlohmann::json> parse_manifest_text(std::string_view text, std::string* why) {
  nlohmann::json manifest;
  try {
    manifest =
        parse_json(text, ErrorKind::kIo, "manifest.json",
                   {.max_bytes = kMaxManifestBytes, .max_depth = kRequestJsonLimits.max_depth});
  } catch (const Error& e) {
    *why = e.what();
    return std::nullopt;
  }
  if (!manifest.is_object()) {
    *why = "manifest.json is not a JSON object";
    return std::nullopt;
  }
  return manifest;
}

}  // namespace shardload::serve
