#include "serve/node_commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/json_input.h"
#include "serve/cluster_ops.h"
#include "serve/requests.h"
#include "shardload/distributed.h"
#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {
namespace {

constexpr int kWakeTag = 32000;  // above the striped loads' tags (distributed/striped_load.cc)
// A command carries at most a request body (kServeMaxBodyBytes) and an answer at most a node's
// checksums: a peer's message is bounded like any input.
constexpr JsonLimits kCommandLimits{.max_bytes = 2 * kServeMaxBodyBytes};

nlohmann::json parse_peer_json(std::string_view text, int node) {
  return parse_json(text, ErrorKind::kNode, fmt::format("the message of node {}", node),
                    kDataJsonLimits);
}

}  // namespace

NodeCommands::NodeCommands(ShmStore& store) : store_(store), transport_(*store.transport()) {}

std::vector<nlohmann::json> NodeCommands::gather(const nlohmann::json& mine) {
  const std::vector<std::string> all = transport_.all_gather(mine.dump());
  std::vector<nlohmann::json> out;
  for (size_t n = 0; n < all.size(); ++n)
    out.push_back(parse_peer_json(all[n], static_cast<int>(n)));
  return out;
}

std::vector<nlohmann::json> NodeCommands::run(const nlohmann::json& command) {
  std::vector<Transport::Handle> handles;
  for (int n = 1; n < transport_.nodes(); ++n)
    handles.push_back(transport_.send(n, kWakeTag, wake_));
  for (Transport::Handle handle : handles) {
    while (!transport_.done(handle)) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  transport_.all_gather(command.dump());
  return gather(execute(command));
}

void NodeCommands::follow() {
  for (;;) {
    std::array<std::byte, 8> wake{};
    // Idle for as long as node 0 has no command: no stall timeout on this wait.
    const Transport::Handle handle = transport_.receive_idle(0, kWakeTag, wake);
    auto nap = std::chrono::microseconds(100);
    while (!transport_.done(handle)) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(20000));
    }
    const std::vector<std::string> all = transport_.all_gather("");
    nlohmann::json command;
    std::string op;
    try {
      command = parse_json(all.at(0), ErrorKind::kNode, "node 0's command", kCommandLimits);
      op = command.at("op").get<std::string>();
    } catch (const std::exception&) {
      op.clear();  // execute agrees with node 0 that the command is bad
    }
    try {
      gather(execute(command));
    } catch (const Error&) {
      // Every node agreed on the error; node 0 answers it.
    }
    if (op == "stop") return;
  }
}

nlohmann::json NodeCommands::execute(const nlohmann::json& command) {
  std::string op;
  UpdateRequest update;
  std::vector<std::vector<int>> map;
  run_on_every_node(transport_, [&] {
    if (!command.is_object() || !command.contains("op") || !command.at("op").is_string()) {
      throw Error(ErrorKind::kNode, "a command from node 0 that is not one");
    }
    op = command.at("op").get<std::string>();
    if (op == "update") {
      update = parse_update_request(command.at("body").get<std::string>());
      update.model_path = command.at("model_path").get<std::string>();
    } else if (op == "rebalance") {
      map = parse_expert_map(command.at("map"));
    } else if (op != "checksum" && op != "state" && op != "stop") {
      throw Error(ErrorKind::kNode, "an unknown command from node 0", {.found = op});
    }
  });
  if (op == "update") return cluster_update(store_, update.model_path, update.filter);
  if (op == "rebalance") return cluster_rebalance(store_, map);
  if (op == "checksum") return node_checksums(store_);
  if (op == "state") return node_state(store_);
  return {{"node", transport_.node()}};
}

}  // namespace shardload::serve
