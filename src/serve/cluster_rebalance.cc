// Rebalancing on a server of several nodes: each rewritten slot copies a live slot that holds its
// new expert, of its own node when one does (a memory copy), else of another node, which sends the
// live bytes. Nothing is read from storage.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>

#include "core/parallel_for.h"
#include "core/seconds_since.h"
#include "reload/rebalance_moves.h"
#include "serve/cluster_ops.h"
#include "serve/cluster_steps.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload::serve {
namespace {

// Tags above the striped loads' (distributed/striped_load.cc keeps below 32000).
constexpr int kSlotTag = 32001;

// Where the bytes of a slot that crosses nodes lie in the message between its two nodes.
using SlotKey = std::tuple<size_t, size_t, uint64_t>;  // rank index, param, slot

// The slots that cross between each pair of nodes, in one order that both ends derive from the
// move plan: the sender packs them in it and the receiver finds each at its offset.
struct Crossing {
  std::vector<std::vector<SlotKey>> to;    // [node]: what this node sends it
  std::vector<std::vector<SlotKey>> from;  // [node]: what this node receives from it
};

Crossing crossing_slots(const reload::MovePlan& moves, const reload::RankSet& set, int me,
                        int nodes) {
  Crossing out{std::vector<std::vector<SlotKey>>(static_cast<size_t>(nodes)),
               std::vector<std::vector<SlotKey>>(static_cast<size_t>(nodes))};
  for (const reload::Move& move : moves.moves) {
    const int dst = set.node_of[move.rank_index];
    for (size_t k : reload::copied_params(moves, move.module, set.ranks[move.rank_index])) {
      for (uint64_t j = 0; j < moves.slots; ++j) {
        if (!move.from[j]) continue;
        const reload::SlotRef& from = *move.from[j];
        const int src = set.node_of[from.rank_index];
        if (src == dst) continue;
        const SlotKey key{from.rank_index, k, from.slot};
        if (src == me) out.to[static_cast<size_t>(dst)].push_back(key);
        if (dst == me) out.from[static_cast<size_t>(src)].push_back(key);
      }
    }
  }
  return out;
}

uint64_t slot_bytes(const reload::MovePlan& moves, const reload::RankSet& set, const SlotKey& key) {
  const PlanParam& param =
      moves.plan.ranks[static_cast<size_t>(set.ranks[std::get<0>(key)])].params[std::get<1>(key)];
  return param.nbytes / moves.slots;
}

}  // namespace

nlohmann::json cluster_rebalance(ShmStore& store, const std::vector<std::vector<int>>& map) {
  const auto start = std::chrono::steady_clock::now();
  Transport& transport = *store.transport();
  LiveModel& live = store.live();
  const int me = transport.node();
  const int nodes = transport.nodes();
  const NodeRanks held = store.scope().held;
  const int threads = store.update_options().threads;

  reload::RankSet set;
  for (int r = 0; r < static_cast<int>(live.plan.ranks.size()); ++r) {
    set.ranks.push_back(r);
    set.node_of.push_back(r / (held.last - held.first));  // node_ranks: equal contiguous blocks
  }
  reload::MovePlan moves;
  run_on_every_node(transport, [&] { moves = reload::plan_rebalance(live.plan, map, set); });
  const auto live_slot = [&](const SlotKey& key) -> const std::byte* {
    const auto [i, k, slot] = key;
    const PlanParam& param = moves.plan.ranks[i].params[k];
    return live.ranks[i - static_cast<size_t>(held.first)].buffer.data() + param.offset +
           slot * (param.nbytes / moves.slots);
  };

  // This node's units, indexed like its live ranks.
  std::vector<reload::Unit> units;
  std::vector<const reload::Move*> my_moves;
  for (size_t u = 0; u < moves.units.size(); ++u) {
    if (set.node_of[moves.units[u].rank_index] != me) continue;
    units.push_back(moves.units[u]);
    units.back().rank_index -= static_cast<size_t>(held.first);
    my_moves.push_back(&moves.moves[u]);
  }

  std::optional<reload::Staging> staging;
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t local = 0;
  try {
    run_on_every_node(transport, [&] {
      staging.emplace(live);
      const Crossing crossing = crossing_slots(moves, set, me, nodes);
      // One message each way per pair of nodes: the sender packs the live slots (no commit has
      // changed them: every node commits only after this step's agreement).
      std::vector<std::shared_ptr<std::vector<std::byte>>> buffers;
      std::vector<Transport::Handle> handles;
      std::map<SlotKey, const std::byte*> arrived;
      for (int n = 0; n < nodes; ++n) {
        const auto& keys = crossing.to[static_cast<size_t>(n)];
        if (keys.empty()) continue;
        auto out = std::make_shared<std::vector<std::byte>>();
        for (const SlotKey& key : keys) {
          const std::byte* bytes = live_slot(key);
          out->insert(out->end(), bytes, bytes + slot_bytes(moves, set, key));
        }
        sent += out->size();
        handles.push_back(transport.send(n, kSlotTag, *out));
        buffers.push_back(std::move(out));
      }
      for (int n = 0; n < nodes; ++n) {
        const auto& keys = crossing.from[static_cast<size_t>(n)];
        if (keys.empty()) continue;
        uint64_t total = 0;
        for (const SlotKey& key : keys) total += slot_bytes(moves, set, key);
        auto in = std::make_shared<std::vector<std::byte>>(total);
        uint64_t offset = 0;
        for (const SlotKey& key : keys) {
          arrived[key] = in->data() + offset;
          offset += slot_bytes(moves, set, key);
        }
        received += total;
        handles.push_back(transport.receive(n, kSlotTag, *in));
        buffers.push_back(std::move(in));
      }
      for (Transport::Handle handle : handles) {
        while (!transport.done(handle)) std::this_thread::yield();
      }
      const reload::SlotSource source = [&](size_t i, size_t k, uint64_t slot) {
        if (set.node_of[i] == me) return live_slot({i, k, slot});
        return arrived.at({i, k, slot});
      };
      std::atomic<uint64_t> copied{0};
      parallel_for(my_moves.size(), threads, [&](size_t m, int) {
        const reload::Move& move = *my_moves[m];
        const size_t i = move.rank_index - static_cast<size_t>(held.first);
        const reload::CopiedBytes bytes =
            reload::stage_move(moves, set, move, source, live.ranks[i].buffer.data(),
                               staging->ranks()[i].buffer.data());
        copied += bytes.local + bytes.remote;
      });
      local = copied - received;
    });
  } catch (...) {
    if (staging) staging->keep(live);
    throw;
  }
  const double seconds_stage = seconds_since(start);
  // The new plan (its parallel config carries the new map) is published with the bytes.
  const CommitResult commit = commit_on_every_node(store, *staging, units, [&](bool complete) {
    live.plan = std::move(moves.plan);
    // Slots moved on some nodes only: no map describes the bytes, and a restart must reload.
    if (!complete) store.record_source(live.model_path, {}, false, nullptr);
  });
  if (staging) staging->keep(live);
  uint64_t tensors = 0;
  for (const reload::Unit& unit : units) tensors += unit.tensors;
  return {{"node", me},
          {"warning", commit.warning},
          {"version", live.version},
          {"updated_tensors", tensors},
          {"changed_bytes", commit.changed_bytes},
          {"bytes_read", 0},
          {"bytes_copied_locally", local},
          {"bytes_sent", sent},
          {"bytes_received", received},
          {"seconds_stage", seconds_stage},
          {"seconds_commit", commit.seconds}};
}

}  // namespace shardload::serve
