#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "serve/shm_store.h"

namespace shardload::serve {

// What an endpoint answers: an HTTP status and a JSON body.
struct Reply {
  int status = 200;
  nlohmann::json body;
};

// The endpoints of the weight server, apart from HTTP so that each is a plain call. Updates,
// rebalances and checksum passes run one at a time (a checksum must not read a commit half done);
// health and model info never wait for them.
class WeightService {
 public:
  WeightService(ShmStore& store, int nodes);

  Reply health() const;
  Reply model_info() const;
  Reply update_weights_from_disk(std::string_view body);
  Reply rebalance(std::string_view body);
  Reply weights_checksum();

 private:
  // After every update or rebalance, successful or not: a failure between commit groups still
  // changed bytes and the version, and the manifest must say so.
  void finish_change();
  uint64_t published_version() const;

  ShmStore& store_;
  const int nodes_;
  const nlohmann::json static_info_;  // what never changes while serving, copied once
  std::mutex change_mutex_;
  mutable std::mutex info_mutex_;  // guards the two copies below, read by model_info
  std::string model_path_;
  uint64_t version_ = 0;
};

}  // namespace shardload::serve
