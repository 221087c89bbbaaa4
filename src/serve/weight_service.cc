#include "serve/weight_service.h"

#include <fmt/format.h>

#include <exception>

#include "serve/manifest.h"
#include "serve/requests.h"
#include "shardload/eplb.h"
#include "shardload/error.h"
#include "shardload/loader.h"

namespace shardload::serve {
namespace {

Reply failure(std::string_view message, uint64_t version) {
  return {
      400,
      {{"success", false}, {"message", message}, {"version", version}, {"num_updated_tensors", 0}}};
}

std::string summary(const UpdateResult& result) {
  return fmt::format(
      "{} tensors ({} bytes) rewritten in {} commit group(s); stage {:.3f} s, commit {:.3f} s, "
      "longest "
      "pause {:.3f} ms",
      result.updated_tensors, result.changed_bytes, result.groups, result.seconds_stage,
      result.seconds_commit, result.max_pause_seconds * 1e3);
}

nlohmann::json static_info(const ShmStore& store) {
  const Plan& plan = store.live().plan;
  nlohmann::json info = {{"architecture", plan.model.architecture},
                         {"tp_size", plan.parallel.tp},
                         {"ep_size", plan.parallel.ep},
                         {"dtype", dtype_name(plan.dtype)},
                         {"quantization", quantization_name(plan.quantization)},
                         {"shm_dir", store.dir()}};
  add_dp_fields(plan.parallel, info);
  return info;
}

}  // namespace

WeightService::WeightService(ShmStore& store, int nodes)
    : store_(store),
      nodes_(nodes),
      static_info_(static_info(store)),
      model_path_(store.live().model_path),
      version_(store.live().version) {}

Reply WeightService::health() const { return {200, {{"status", "ok"}}}; }

uint64_t WeightService::published_version() const {
  std::lock_guard lock(info_mutex_);
  return version_;
}

Reply WeightService::model_info() const {
  nlohmann::json body = static_info_;
  std::lock_guard lock(info_mutex_);
  body["model_path"] = model_path_;
  body["version"] = version_;
  return {200, std::move(body)};
}

void WeightService::finish_change() {
  store_.write_manifest(false);
  std::lock_guard lock(info_mutex_);
  model_path_ = store_.live().model_path;
  version_ = store_.live().version;
}

Reply WeightService::update_weights_from_disk(std::string_view body) {
  UpdateRequest request;
  try {
    request = parse_update_request(body);
    // A relative model_path is taken from the server's working directory, as the start-up path is.
    request.model_path = absolute_model_path(request.model_path);
  } catch (const Error& e) {
    return failure(e.what(), published_version());
  }
  std::lock_guard change(change_mutex_);
  LiveModel& live = store_.live();
  store_.write_manifest(true);
  try {
    const UpdateResult result =
        update_weights(live, request.model_path, request.filter, store_.update_options());
    finish_change();
    return {200,
            {{"success", true},
             {"message", fmt::format("updated from {}: {}", request.model_path, summary(result))},
             {"version", result.version},
             {"num_updated_tensors", result.updated_tensors}}};
  } catch (const std::exception& e) {
    finish_change();
    return failure(e.what(), live.version);
  }
}

Reply WeightService::rebalance(std::string_view body) {
  std::lock_guard change(change_mutex_);
  LiveModel& live = store_.live();
  std::vector<std::vector<int>> map;
  try {
    RebalanceRequest request = parse_rebalance_request(body);
    if (!live.plan.model.is_moe()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} has no experts to rebalance", live.plan.model.architecture));
    }
    if (request.physical_to_logical_map) {
      map = std::move(*request.physical_to_logical_map);
    } else {
      // SGLang's and vLLM's EPLB inputs: every physical slot is placed again, over the EP ranks.
      const uint64_t groups = live.plan.model.n_group == 0 ? 1 : live.plan.model.n_group;
      const EplbInput input{.load = std::move(*request.expert_load),
                            .replicas = live.plan.physical_experts,
                            .groups = static_cast<int>(groups),
                            .nodes = nodes_,
                            .gpus = live.plan.parallel.ep};
      map = shardload::rebalance_experts(input).physical_to_logical_map;
    }
  } catch (const Error& e) {
    return failure(e.what(), live.version);
  }
  store_.write_manifest(true);
  try {
    const UpdateResult result = shardload::rebalance_experts(live, map, store_.update_options());
    finish_change();
    return {200,
            {{"success", true},
             {"message", fmt::format("rebalanced: {}; {} bytes copied within ranks, {} between "
                                     "ranks, nothing read from storage",
                                     summary(result), result.local_bytes, result.remote_bytes)},
             {"version", result.version},
             {"num_updated_tensors", result.updated_tensors},
             {"physical_to_logical_map", live.plan.physical_to_logical}}};
  } catch (const std::exception& e) {
    finish_change();
    return failure(e.what(), live.version);
  }
}

Reply WeightService::weights_checksum() {
  std::lock_guard change(change_mutex_);
  const LiveModel& live = store_.live();
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankWeights& weights : live.ranks) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const PlanParam& param : live.plan.ranks[static_cast<size_t>(weights.rank)].params) {
      if (param.exported()) tensors[param.name] = xxh3_hex(param_view(weights, param).data);
    }
    ranks.push_back({{"rank", weights.rank}, {"tensors", std::move(tensors)}});
  }
  return {200, {{"version", live.version}, {"ranks", std::move(ranks)}}};
}

}  // namespace shardload::serve
