#include "serve/manifest.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "serve/shm_layout.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {

nlohmann::json manifest_ranks(const Plan& plan) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlan& rank : plan.ranks) {
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

nlohmann::json make_manifest(std::string_view name, const LiveModel& live,
                             bool update_in_progress) {
  return {{"format", kShmManifestFormat},
          {"name", name},
          {"model_path", live.model_path},
          {"version", live.version},
          {"tp_size", live.plan.parallel.tp},
          {"ep_size", live.plan.parallel.ep},
          {"physical_to_logical_map", live.plan.physical_to_logical},
          {"update_in_progress", update_in_progress},
          {"ranks", manifest_ranks(live.plan)}};
}

void write_manifest(const std::string& dir, const nlohmann::json& manifest) {
  const std::string path = dir + "/manifest.json";
  const std::string temp = dir + "/manifest.json.tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << manifest.dump(1) << "\n";
    out.close();
    if (!out) throw Error(ErrorKind::kIo, "cannot write the manifest", {.file = temp});
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    throw Error(ErrorKind::kIo, fmt::format("rename to {} failed: {}", path, std::strerror(errno)),
                {.file = temp});
  }
}

std::optional<nlohmann::json> read_manifest(const std::string& dir, std::string* why) {
  const std::string path = dir + "/manifest.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "no manifest.json";
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object()) {
    *why = "manifest.json is not a JSON object";
    return std::nullopt;
  }
  return manifest;
}

}  // namespace shardload::serve
