#include "serve/device_store.h"

#include <fmt/format.h>

#include "shardload/error.h"
#include "shardload/serve.h"

namespace shardload::serve {

DeviceStore::DeviceStore(ShmStore& store, const std::vector<int>& device_map) : store_(store) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw Error(ErrorKind::kDevice, fmt::format("--device cuda: {}", why));
  const LiveModel& live = store_.live();
  std::vector<int> ranks;
  for (const RankWeights& w : live.ranks) ranks.push_back(w.rank);
  const std::vector<int> devices = assign_devices(ranks, cuda_device_count(), device_map);
  for (size_t i = 0; i < live.ranks.size(); ++i) {
    ranks_.emplace_back(devices[i], live.ranks[i].buffer.size());
  }
  sync();
  store_.set_device_hooks([this] { sync(); }, manifest());
  store_.write_manifest();
}

DeviceStore::~DeviceStore() { store_.set_device_hooks({}, {}); }

void DeviceStore::sync() {
  std::vector<std::span<const std::byte>> from;
  for (const RankWeights& w : store_.live().ranks) from.push_back(w.buffer.span());
  copy_to_devices(from, ranks_);
}

nlohmann::json DeviceStore::manifest() const {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const std::string hex = ipc_handle_hex(ranks_[i].ipc_handle());
    ranks.push_back({{"rank", store_.live().ranks[i].rank},
                     {"device", ranks_[i].device()},
                     {"bytes", ranks_[i].size()},
                     {"ipc_handle", hex}});
  }
  // A tensor of manifest "ranks"[r]["tensors"] at file offset o is at device byte o -
  // tensor_offset; the sequence word stays at byte 8 of the rank file in host shared memory.
  return {{"format", kCudaIpcFormat},
          {"tensor_offset", kShmHeaderBytes},
          {"sequence", "rank file bytes 8-15 (host shared memory), as without --device"},
          {"ranks", std::move(ranks)}};
}

}  // namespace shardload::serve
