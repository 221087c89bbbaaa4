#include "serve/weight_service.h"

#include <fmt/format.h>

#include <exception>
#include <functional>

#include "serve/cluster_ops.h"
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

// A change that failed after some of its bytes were committed, published as a version of its own.
Reply incomplete(std::string_view message, uint64_t version) {
  return {500,
          {{"success", false},
           {"incomplete", true},
           {"message", fmt::format("{}; the server publishes version {}, whose bytes "
                                   "/get_model_info's sources describe, and a restart reloads",
                                   message, version)},
           {"version", version},
           {"num_updated_tensors", 0}}};
}

std::string summary(const UpdateResult& result) {
  return fmt::format(
      "{} tensors ({} bytes) rewritten in {} commit group(s); stage {:.3f} s, commit {:.3f} s, "
      "longest "
      "pause {:.3f} ms{}",
      result.updated_tensors, result.changed_bytes, result.groups, result.seconds_stage,
      result.seconds_commit, result.max_pause_seconds * 1e3,
      result.synced_bytes > 0 ? fmt::format("; {} bytes of the last change copied into the spare slot first",
                                            result.synced_bytes)
                              : "");
}

nlohmann::json static_info(const ShmStore& store) {
  const Plan& plan = store.live().plan;
  nlohmann::json info = {{"architecture", plan.model.architecture},
                         {"tp_size", plan.parallel.tp},
                         {"ep_size", plan.parallel.ep},
                         {"dtype", dtype_name(plan.dtype)},
                         {"quantization", quantization_label(plan.model, plan.quantization)},
                         {"shm_dir", store.dir()}};
  add_dp_fields(plan.parallel, info);
  return info;
}

}  // namespace

WeightService::WeightService(ShmStore& store, int nodes, NodeCommands* commands)
    : store_(store),
      nodes_(nodes),
      commands_(commands),
      static_info_(static_info(store)),
      model_path_(store.live().model_path),
      version_(store.live().version),
      sources_(store.sources()) {
  if (commands_ != nullptr) refresh_nodes();
}

void WeightService::refresh_nodes() {
  nlohmann::json states = nlohmann::json::array();
  for (nlohmann::json& state : commands_->run({{"op", "state"}})) states.push_back(std::move(state));
  std::lock_guard lock(info_mutex_);
  node_states_ = std::move(states);
  model_path_ = store_.live().model_path;
  version_ = store_.live().version;
  sources_ = store_.sources();
}

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
  body["sources"] = sources_;
  if (commands_ != nullptr) body["nodes"] = node_states_;
  return {200, std::move(body)};
}

void WeightService::publish_info() {
  std::lock_guard lock(info_mutex_);
  model_path_ = store_.live().model_path;
  version_ = store_.live().version;
  sources_ = store_.sources();
}

WeightService::Outcome WeightService::run_change(const std::function<UpdateResult()>& change,
                                                 const std::function<void(bool)>& record) {
  LiveModel& live = store_.live();
  store_.begin_change();  // throws before any byte or flag changed
  const uint64_t before = live.version;
  Outcome outcome;
  try {
    outcome.result = change();
  } catch (const std::exception& e) {
    outcome.error = e.what();
  }
  outcome.committed = live.version != before;
  if (outcome.committed) record(outcome.result.has_value());
  outcome.warning = store_.publish_change();
  publish_info();
  return outcome;
}

Reply WeightService::answer(const Outcome& outcome, nlohmann::json body) const {
  const uint64_t version = store_.live().version;
  if (!outcome.committed) return failure(outcome.error, version);
  // Only a bounded staging (--staging-bytes) commits in several groups: the groups before the
  // failure hold the new weights.
  if (!outcome.result) return incomplete(outcome.error, version);
  body["success"] = true;
  body["version"] = outcome.result->version;
  body["num_updated_tensors"] = outcome.result->updated_tensors;
  if (!outcome.warning.empty()) body["warnings"] = {outcome.warning};
  return {200, std::move(body)};
}

Reply WeightService::update_weights_from_disk(std::string_view body) {
  UpdateRequest request;
  try {
    request = parse_update_request(body);
    // A relative model_path is taken from the server's working directory, as the start-up path is.
    request.model_path = absolute_model_path(request.model_path, request.revision);
  } catch (const Error& e) {
    return failure(e.what(), published_version());
  }
  std::lock_guard change(change_mutex_);
  if (commands_ != nullptr) return update_everywhere(std::string(body), request.model_path);
  LiveModel& live = store_.live();
  Outcome outcome;
  std::optional<CheckpointIdentity> source;
  try {
    outcome = run_change(
        [&] {
          UpdateResult result = update_weights(live, request.model_path, request.filter, store_.update_options());
          source = result.source;
          return result;
        },
        [&](bool complete) {
          live.model_path = request.model_path;
          store_.record_source(request.model_path, request.filter, complete,
                               complete && source ? &*source : nullptr);
        });
  } catch (const std::exception& e) {
    return failure(e.what(), published_version());
  }
  const std::string message =
      outcome.result ? fmt::format("updated from {}: {}", request.model_path, summary(*outcome.result))
                     : std::string();
  return answer(outcome, {{"message", message}});
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
  if (commands_ != nullptr) return rebalance_everywhere(map);
  Outcome outcome;
  try {
    outcome = run_change(
        [&] { return shardload::rebalance_experts(live, map, store_.update_options()); },
        [&](bool complete) {
          // Slots moved in some groups only: no map describes the bytes, and a restart reloads.
          if (!complete) store_.record_source(live.model_path, {}, false, nullptr);
        });
  } catch (const std::exception& e) {
    return failure(e.what(), published_version());
  }
  if (!outcome.result) return answer(outcome, {});
  const UpdateResult& result = *outcome.result;
  return answer(outcome,
                {{"message", fmt::format("rebalanced: {}; {} bytes copied within ranks, {} between "
                                         "ranks, nothing read from storage",
                                         summary(result), result.local_bytes, result.remote_bytes)},
                 {"physical_to_logical_map", live.plan.physical_to_logical}});
}

Reply WeightService::weights_checksum() {
  std::lock_guard change(change_mutex_);
  if (commands_ != nullptr) return checksums_everywhere();
  return {200, {{"version", store_.live().version}, {"ranks", rank_checksums(store_.live())}}};
}

namespace {

uint64_t sum_of(const std::vector<nlohmann::json>& nodes, const char* key) {
  uint64_t total = 0;
  for (const nlohmann::json& node : nodes) total += node.value(key, uint64_t{0});
  return total;
}

// Every node must show the version node 0 shows: a node that did not is named.
void check_versions(const std::vector<nlohmann::json>& nodes, uint64_t version) {
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].value("version", uint64_t{0}) != version) {
      throw Error(ErrorKind::kNode, fmt::format("node {} reports another version than node 0", n),
                  {.expected = std::to_string(version),
                   .found = nodes[n].value("version", nlohmann::json()).dump()});
    }
  }
}

// Each node's publish warning (a manifest it could not rewrite), named by node.
void add_warnings(const std::vector<nlohmann::json>& nodes, nlohmann::json& body) {
  nlohmann::json warnings = nlohmann::json::array();
  for (size_t n = 0; n < nodes.size(); ++n) {
    const std::string warning = nodes[n].value("warning", "");
    if (!warning.empty()) warnings.push_back(fmt::format("node {}: {}", n, warning));
  }
  if (!warnings.empty()) body["warnings"] = std::move(warnings);
}

}  // namespace

Reply WeightService::update_everywhere(const std::string& body, const std::string& model_path) {
  const uint64_t before = store_.live().version;
  try {
    const std::vector<nlohmann::json> nodes =
        commands_->run({{"op", "update"}, {"body", body}, {"model_path", model_path}});
    const uint64_t version = store_.live().version;
    check_versions(nodes, version);
    refresh_nodes();
    Reply reply{200,
            {{"success", true},
             {"message",
              fmt::format("updated from {} on {} nodes: {} tensors ({} bytes) rewritten; {} bytes "
                          "read from storage, {} sent between nodes",
                          model_path, nodes.size(), sum_of(nodes, "updated_tensors"),
                          sum_of(nodes, "changed_bytes"), sum_of(nodes, "bytes_read"),
                          sum_of(nodes, "bytes_sent"))},
             {"version", version},
             {"num_updated_tensors", sum_of(nodes, "updated_tensors")},
             {"nodes", nodes}}};
    add_warnings(nodes, reply.body);
    return reply;
  } catch (const std::exception& e) {
    refresh_nodes();
    if (store_.live().version != before) return incomplete(e.what(), published_version());
    return failure(e.what(), published_version());
  }
}

Reply WeightService::rebalance_everywhere(const std::vector<std::vector<int>>& map) {
  const uint64_t before = store_.live().version;
  try {
    const std::vector<nlohmann::json> nodes = commands_->run({{"op", "rebalance"}, {"map", map}});
    const uint64_t version = store_.live().version;
    check_versions(nodes, version);
    refresh_nodes();
    Reply reply{200,
            {{"success", true},
             {"message", fmt::format("rebalanced on {} nodes: {} tensors ({} bytes) rewritten; {} "
                                     "bytes copied within nodes, {} sent between nodes, nothing "
                                     "read from storage",
                                     nodes.size(), sum_of(nodes, "updated_tensors"),
                                     sum_of(nodes, "changed_bytes"),
                                     sum_of(nodes, "bytes_copied_locally"),
                                     sum_of(nodes, "bytes_sent"))},
             {"version", version},
             {"num_updated_tensors", sum_of(nodes, "updated_tensors")},
             {"physical_to_logical_map", store_.live().plan.physical_to_logical},
             {"nodes", nodes}}};
    add_warnings(nodes, reply.body);
    return reply;
  } catch (const std::exception& e) {
    refresh_nodes();
    if (store_.live().version != before) return incomplete(e.what(), published_version());
    return failure(e.what(), published_version());
  }
}

Reply WeightService::checksums_everywhere() {
  std::vector<nlohmann::json> nodes = commands_->run({{"op", "checksum"}});
  nlohmann::json ranks = nlohmann::json::array();
  nlohmann::json versions = nlohmann::json::array();
  for (nlohmann::json& node : nodes) {
    versions.push_back({{"node", node.value("node", -1)}, {"version", node.value("version", 0)}});
    for (nlohmann::json& rank : node.at("ranks")) ranks.push_back(std::move(rank));
  }
  return {200, {{"version", store_.live().version}, {"ranks", std::move(ranks)}, {"nodes", versions}}};
}

}  // namespace shardload::serve
