// Who reads which checkpoint bytes when several nodes load one layout: the needed row ranges of
// every source are split by the set of nodes that need them, cut into chunks and each chunk given
// one reader. Pure arithmetic on the plan: the loader and `plan --nodes` call the same function.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>

#include "core/plural.h"
#include "shardload/distributed.h"
#include "shardload/error.h"

namespace shardload {
namespace {

constexpr uint64_t kMinChunk = uint64_t{4} << 10;
constexpr uint64_t kMaxChunk = uint64_t{16} << 20;
constexpr uint64_t kChunksPerNode = 128;
constexpr double kPreferNeederSlack = 1.05;  // a needing node reads up to 5% over the mean

// Rows [begin, end) of a source that the nodes of `nodes` need.
struct RowSpan {
  uint64_t begin;
  uint64_t end;
  uint64_t nodes;
};

// Per source: where each node's ranks read it, as +1/-1 events at row boundaries.
struct RowEvent {
  uint64_t row;
  int delta;
  int node;
};

std::vector<std::vector<RowEvent>> node_events(const Plan& plan, int nodes) {
  std::vector<std::vector<RowEvent>> events(plan.sources.size());
  const int ranks = static_cast<int>(plan.ranks.size());
  for (int node = 0; node < nodes; ++node) {
    const NodeRanks held = node_ranks(ranks, nodes, node);
    for (int r = held.first; r < held.last; ++r) {
      for (const PlanParam& param : plan.ranks[static_cast<size_t>(r)].params) {
        for (const PlanPiece& piece : param.pieces) {
          if (piece.rows() == 0) continue;
          events[piece.source].push_back({piece.row_begin, +1, node});
          events[piece.source].push_back({piece.row_end, -1, node});
        }
      }
    }
  }
  return events;
}

// The source's needed rows as maximal spans with one node set each.
std::vector<RowSpan> row_spans(std::vector<RowEvent>& events) {
  std::sort(events.begin(), events.end(),
            [](const RowEvent& a, const RowEvent& b) { return a.row < b.row; });
  std::vector<RowSpan> spans;
  int count[kMaxNodes] = {};
  uint64_t mask = 0;
  for (size_t i = 0; i < events.size();) {
    const uint64_t row = events[i].row;
    for (; i < events.size() && events[i].row == row; ++i) {
      count[events[i].node] += events[i].delta;
      if (count[events[i].node] > 0) {
        mask |= uint64_t{1} << events[i].node;
      } else {
        mask &= ~(uint64_t{1} << events[i].node);
      }
    }
    if (i == events.size() || mask == 0) continue;
    const uint64_t end = events[i].row;
    if (!spans.empty() && spans.back().end == row && spans.back().nodes == mask) {
      spans.back().end = end;
    } else {
      spans.push_back({row, end, mask});
    }
  }
  return spans;
}

// Appends the span's bytes as chunks of at most `chunk_bytes` (at least one row), merged with the
// previous chunk when they continue it for the same nodes.
void add_chunks(const Plan& plan, size_t source, const RowSpan& span, uint64_t chunk_bytes,
                std::vector<ReadChunk>& chunks) {
  const PlanSource& src = plan.sources[source];
  const uint64_t row_bytes = src.cols * dtype_bits(src.dtype) / 8;
  if (row_bytes == 0) return;
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, chunk_bytes / row_bytes);
  for (uint64_t row = span.begin; row < span.end; row += rows_per_chunk) {
    const uint64_t rows = std::min(rows_per_chunk, span.end - row);
    const ReadChunk chunk{static_cast<uint32_t>(src.file),
                          src.file_offset + row * row_bytes,
                          rows * row_bytes,
                          span.nodes,
                          0,
                          static_cast<uint32_t>(source)};
    ReadChunk* last = chunks.empty() ? nullptr : &chunks.back();
    if (last != nullptr && last->file == chunk.file && last->offset + last->bytes == chunk.offset &&
        last->nodes == chunk.nodes && last->bytes + chunk.bytes <= chunk_bytes) {
      last->bytes += chunk.bytes;
    } else {
      chunks.push_back(chunk);
    }
  }
}

int least_loaded(const std::vector<uint64_t>& load, uint64_t nodes) {
  int best = -1;
  for (int n = 0; n < static_cast<int>(load.size()); ++n) {
    if (((nodes >> n) & 1) &&
        (best < 0 || load[static_cast<size_t>(n)] < load[static_cast<size_t>(best)]))
      best = n;
  }
  return best;
}

void assign_readers(ReadAssignment& out) {
  const uint64_t everyone = out.nodes == 64 ? ~uint64_t{0} : (uint64_t{1} << out.nodes) - 1;
  const double limit = static_cast<double>(out.needed_bytes()) / out.nodes * kPreferNeederSlack;
  std::vector<uint64_t> load(static_cast<size_t>(out.nodes), 0);
  for (ReadChunk& chunk : out.chunks) {
    int reader = least_loaded(load, chunk.nodes);
    if (static_cast<double>(load[static_cast<size_t>(reader)] + chunk.bytes) > limit) {
      reader = least_loaded(load, everyone);
    }
    chunk.reader = reader;
    load[static_cast<size_t>(reader)] += chunk.bytes;
  }
}

void count_traffic(ReadAssignment& out) {
  for (const ReadChunk& chunk : out.chunks) {
    for (int n = 0; n < out.nodes; ++n) {
      NodeTraffic& node = out.per_node[static_cast<size_t>(n)];
      if (chunk.needed_by(n)) node.needed += chunk.bytes;
      if (out.policy == ReadPolicy::kLocal) continue;
      if (chunk.reader == n) {
        node.read += chunk.bytes;
        const int others = std::popcount(chunk.nodes) - (chunk.needed_by(n) ? 1 : 0);
        node.sent += chunk.bytes * static_cast<uint64_t>(others);
      } else if (chunk.needed_by(n)) {
        node.received += chunk.bytes;
      }
    }
  }
  if (out.policy == ReadPolicy::kLocal) {
    for (NodeTraffic& node : out.per_node) node.read = node.needed;
  }
}

}  // namespace

std::string_view read_policy_name(ReadPolicy policy) {
  for (const auto& [known, name] : kReadPolicyNames) {
    if (known == policy) return name;
  }
  return "?";
}

std::optional<ReadPolicy> read_policy_from_name(std::string_view name) {
  for (const auto& [policy, text] : kReadPolicyNames) {
    if (name == text) return policy;
  }
  return std::nullopt;
}

NodeRanks node_ranks(int ranks, int nodes, int node) {
  if (nodes < 1 || nodes > kMaxNodes || ranks % nodes != 0) {
    throw Error(ErrorKind::kInvalidArgument, "the node count must divide the rank count",
                {.field = "nodes",
                 .expected = fmt::format("a divisor of {} from 1 to {}", count_of(ranks, "rank"),
                                         kMaxNodes),
                 .found = std::to_string(nodes)});
  }
  if (node < 0 || node >= nodes) {
    throw Error(ErrorKind::kInvalidArgument, "no such node",
                {.field = "node",
                 .expected = fmt::format("0 to {}", nodes - 1),
                 .found = std::to_string(node)});
  }
  const int per_node = ranks / nodes;
  return {node * per_node, (node + 1) * per_node};
}

uint64_t ReadAssignment::needed_bytes() const {
  uint64_t bytes = 0;
  for (const ReadChunk& chunk : chunks) bytes += chunk.bytes;
  return bytes;
}

std::vector<std::vector<uint64_t>> ReadAssignment::cuts(size_t files) const {
  std::vector<std::vector<uint64_t>> out(files);
  for (const ReadChunk& chunk : chunks) out.at(chunk.file).push_back(chunk.offset);
  return out;  // chunks are in (file, offset) order: each list is sorted
}

ReadAssignment assign_reads(const Plan& plan, int nodes, ReadPolicy policy) {
  const int ranks = static_cast<int>(plan.ranks.size());
  ReadAssignment out;
  out.nodes = nodes;
  out.policy = policy;
  for (int n = 0; n < nodes; ++n) out.per_node.push_back({.ranks = node_ranks(ranks, nodes, n)});
  std::vector<std::vector<RowEvent>> events = node_events(plan, nodes);
  std::vector<std::vector<RowSpan>> spans(plan.sources.size());
  uint64_t total = 0;
  for (size_t s = 0; s < plan.sources.size(); ++s) {
    spans[s] = row_spans(events[s]);
    const PlanSource& src = plan.sources[s];
    for (const RowSpan& span : spans[s])
      total += (span.end - span.begin) * src.cols * dtype_bits(src.dtype) / 8;
  }
  out.chunk_bytes =
      std::clamp(total / static_cast<uint64_t>(nodes) / kChunksPerNode, kMinChunk, kMaxChunk);
  std::vector<size_t> order(plan.sources.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(plan.sources[a].file, plan.sources[a].file_offset) <
           std::tie(plan.sources[b].file, plan.sources[b].file_offset);
  });
  for (size_t s : order) {
    for (const RowSpan& span : spans[s]) add_chunks(plan, s, span, out.chunk_bytes, out.chunks);
  }
  if (policy == ReadPolicy::kStriped) assign_readers(out);
  count_traffic(out);
  return out;
}

nlohmann::json ReadAssignment::to_json() const {
  nlohmann::json per = nlohmann::json::array();
  uint64_t most = 0;
  uint64_t read_total = 0;
  for (size_t n = 0; n < per_node.size(); ++n) {
    const NodeTraffic& node = per_node[n];
    per.push_back({{"node", n},
                   {"ranks", {node.ranks.first, node.ranks.last - 1}},
                   {"bytes_needed", node.needed},
                   {"bytes_read", node.read},
                   {"bytes_sent", node.sent},
                   {"bytes_received", node.received}});
    most = std::max(most, node.read);
    read_total += node.read;
  }
  const double mean = static_cast<double>(read_total) / nodes;
  return {{"nodes", nodes},
          {"read", read_policy_name(policy)},
          {"bytes_needed", needed_bytes()},
          {"bytes_read", read_total},
          {"read_max_over_mean", mean > 0 ? static_cast<double>(most) / mean : 1.0},
          {"chunks", chunks.size()},
          {"chunk_bytes", chunk_bytes},
          {"per_node", per}};
}

}  // namespace shardload
