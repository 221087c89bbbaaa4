#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "serve/node_commands.h"
#include "serve/shm_store.h"

namespace shardload::serve {

// What an endpoint answers: an HTTP status and a JSON body.
struct Reply {
  int status = 200;
  nlohmann::json body;
};

// The endpoints of the weight server, apart from HTTP so that each is a plain call. Updates,
// rebalances and checksum passes run one at a time (a checksum must not read a commit half done);
// health and model info never wait for them. On several nodes (`commands` not null, on node 0)
// every change and checksum pass runs on every node, and answers say what each node did.
class WeightService {
 public:
  WeightService(ShmStore& store, int nodes, NodeCommands* commands = nullptr);

  Reply health() const;
  Reply model_info() const;
  Reply update_weights_from_disk(std::string_view body);
  Reply rebalance(std::string_view body);
  Reply weights_checksum();

 private:
  // What a change under the commit protocol did: its result (none: it failed, `error`), whether
  // any commit group ran, and the publish warning.
  struct Outcome {
    std::optional<UpdateResult> result;
    std::string error;
    bool committed = false;
    std::string warning;
  };
  // Runs `change` on this node under ShmStore's commit protocol (begin, commit groups, publish);
  // `record` runs when a group committed (complete: every group did) before the publish. Throws
  // only when the change could not begin (nothing changed).
  Outcome run_change(const std::function<UpdateResult()>& change,
                     const std::function<void(bool complete)>& record);
  // The reply to a change: 400 when nothing changed, 500 "incomplete" when some commit groups
  // did, else 200 with `body` and the result (and the publish warning).
  Reply answer(const Outcome& outcome, nlohmann::json body) const;
  void publish_info();
  uint64_t published_version() const;
  Reply update_everywhere(const std::string& body, const std::string& model_path);
  Reply rebalance_everywhere(const std::vector<std::vector<int>>& map);
  Reply checksums_everywhere();
  // After a change on several nodes: the version and model path node 0 publishes, and each
  // node's state for /get_model_info.
  void refresh_nodes();

  ShmStore& store_;
  const int nodes_;
  NodeCommands* const commands_;
  const nlohmann::json static_info_;  // what never changes while serving, copied once
  std::mutex change_mutex_;
  mutable std::mutex info_mutex_;  // guards the copies below, read by model_info
  std::string model_path_;
  uint64_t version_ = 0;
  nlohmann::json sources_;  // ShmStore::sources
  nlohmann::json node_states_;  // every node's node_state, on several nodes
};

}  // namespace shardload::serve
