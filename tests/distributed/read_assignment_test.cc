#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "load/executor.h"
#include "load/postprocess_ranks.h"
#include "shardload/distributed.h"
#include "shardload/error.h"
#include "shardload/tiny.h"
#include "temp_dir.h"

namespace shardload {
namespace {

using ::shardload::testing::TempDir;

struct Case {
  std::string arch;
  std::string quant;
  int tp;
  int ep;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.arch << " " << c.quant << " tp=" << c.tp << " ep=" << c.ep;
}

std::string make_model(const TempDir& dir, const Case& c) {
  TinyOptions options;
  options.arch = c.arch;
  options.out = dir.file(c.arch);
  options.seed = 7;
  options.quant = c.quant;
  make_tiny(options);
  return options.out;
}

Plan plan_for(const Checkpoint& ckpt, const Case& c) {
  ParallelConfig parallel;
  parallel.tp = c.tp;
  parallel.ep = c.ep;
  return make_plan(ckpt, parallel);
}

using Intervals = std::map<std::pair<uint32_t, uint64_t>, uint64_t>;  // (file, begin) -> end

// The byte ranges the node's ranks read, merged: what the assignment must say it needs.
Intervals needed_by_node(const Plan& plan, NodeRanks ranks) {
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> ranges;
  for (int r = ranks.first; r < ranks.last; ++r) {
    for (const PlanParam& param : plan.ranks[static_cast<size_t>(r)].params) {
      for (const PlanPiece& piece : param.pieces) {
        const PlanSource& src = plan.sources[piece.source];
        const uint64_t row = src.cols * dtype_bits(src.dtype) / 8;
        if (piece.rows() == 0) continue;
        ranges.emplace_back(static_cast<uint32_t>(src.file),
                            src.file_offset + piece.row_begin * row,
                            src.file_offset + piece.row_end * row);
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  Intervals out;
  for (const auto& [file, begin, end] : ranges) {
    if (!out.empty()) {
      auto last = std::prev(out.end());
      if (last->first.first == file && last->second >= begin) {
        last->second = std::max(last->second, end);
        continue;
      }
    }
    out[{file, begin}] = end;
  }
  return out;
}

Intervals chunks_of_node(const ReadAssignment& reads, int node) {
  Intervals out;
  for (const ReadChunk& chunk : reads.chunks) {
    if (!chunk.needed_by(node)) continue;
    if (!out.empty()) {
      auto last = std::prev(out.end());
      if (last->first.first == chunk.file && last->second == chunk.offset) {
        last->second += chunk.bytes;
        continue;
      }
    }
    out[{chunk.file, chunk.offset}] = chunk.offset + chunk.bytes;
  }
  return out;
}

class ReadAssignmentTest : public ::testing::TestWithParam<Case> {};

// Every byte a node's ranks read is in a chunk it needs, no chunk holds a byte it does not need,
// striped reads cover each needed byte once and stay balanced, and the traffic adds up.
TEST_P(ReadAssignmentTest, ChunksCoverEachNodesBytesOnceAndBalanceTheReads) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, GetParam()));
  const Plan plan = plan_for(ckpt, GetParam());
  for (const int nodes : {1, 2, 4}) {
    for (const ReadPolicy policy : {ReadPolicy::kStriped, ReadPolicy::kLocal}) {
      SCOPED_TRACE(::testing::Message() << nodes << " nodes, " << read_policy_name(policy));
      const ReadAssignment reads = assign_reads(plan, nodes, policy);
      for (size_t i = 1; i < reads.chunks.size(); ++i) {
        const ReadChunk& a = reads.chunks[i - 1];
        const ReadChunk& b = reads.chunks[i];
        ASSERT_TRUE(a.file < b.file || (a.file == b.file && a.offset + a.bytes <= b.offset))
            << "chunk " << i;
      }
      uint64_t read = 0;
      uint64_t sent = 0;
      uint64_t received = 0;
      uint64_t most = 0;
      for (int n = 0; n < nodes; ++n) {
        const NodeTraffic& node = reads.per_node[static_cast<size_t>(n)];
        const Intervals needed = needed_by_node(plan, node.ranks);
        EXPECT_EQ(chunks_of_node(reads, n), needed) << "node " << n;
        uint64_t needed_bytes = 0;
        for (const auto& [start, end] : needed) needed_bytes += end - start.second;
        EXPECT_EQ(node.needed, needed_bytes);
        read += node.read;
        sent += node.sent;
        received += node.received;
        most = std::max(most, node.read);
        if (policy == ReadPolicy::kLocal) {
          EXPECT_EQ(node.read, node.needed);
          EXPECT_EQ(node.sent, 0u);
          EXPECT_EQ(node.received, 0u);
        }
      }
      EXPECT_EQ(sent, received);
      if (policy == ReadPolicy::kStriped) {
        EXPECT_EQ(read, reads.needed_bytes());  // each needed byte read once
        EXPECT_LE(static_cast<double>(most), 1.1 * static_cast<double>(read) / nodes);
      }
    }
  }
}

// Each chunk starts and ends on a row boundary of the tensors it cuts: the executor can split its
// pieces there.
TEST_P(ReadAssignmentTest, ChunksEndOnRowBoundaries) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, GetParam()));
  const Plan plan = plan_for(ckpt, GetParam());
  const ReadAssignment reads = assign_reads(plan, 4, ReadPolicy::kStriped);
  for (const ReadChunk& chunk : reads.chunks) {
    for (const uint64_t at : {chunk.offset, chunk.offset + chunk.bytes}) {
      for (const PlanSource& src : plan.sources) {
        const uint64_t row = src.cols * dtype_bits(src.dtype) / 8;
        const uint64_t end = src.file_offset + src.rows * row;
        if (src.file != chunk.file || at <= src.file_offset || at >= end) continue;
        EXPECT_EQ((at - src.file_offset) % row, 0u) << src.name << " at " << at;
      }
    }
  }
}

// The striped fill: a node's ranks filled chunk by chunk from bytes read elsewhere (here, read by
// the test) through the executor's cut jobs equal a single-process load, post-processing included.
TEST_P(ReadAssignmentTest, RanksFilledChunkByChunkEqualALoad) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, GetParam()));
  const Plan plan = plan_for(ckpt, GetParam());
  const std::vector<RankWeights> expected = load_ranks(ckpt, plan);
  const ReadAssignment reads = assign_reads(plan, 2, ReadPolicy::kStriped);
  const NodeRanks held = reads.per_node[1].ranks;
  std::vector<int> held_ranks;
  for (int r = held.first; r < held.last; ++r) held_ranks.push_back(r);
  std::vector<RankWeights> ranks = allocate_ranks(plan, held_ranks);
  load::Executor executor(ckpt, plan);
  executor.set_cuts(reads.cuts(ckpt.files().size()));
  executor.add_ranks(ranks);
  executor.finish();
  std::vector<float> scratch;
  for (const ReadChunk& chunk : reads.chunks) {
    if (!chunk.needed_by(1)) continue;
    std::vector<std::byte> bytes(chunk.bytes);
    format::pread_exact(ckpt.files()[chunk.file].fd(), bytes, chunk.offset, {});
    executor.consume_chunk(chunk.file, chunk.offset, bytes, scratch);
  }
  load::postprocess_ranks(ckpt, plan, ranks, {}, 2);
  for (const RankWeights& weights : ranks) {
    const RankWeights& want = expected[static_cast<size_t>(weights.rank)];
    ASSERT_EQ(weights.buffer.size(), want.buffer.size());
    EXPECT_EQ(std::memcmp(weights.buffer.data(), want.buffer.data(), want.buffer.size()), 0)
        << "rank " << weights.rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ReadAssignmentTest,
                         ::testing::Values(Case{"llama", "none", 4, 1}, Case{"qwen2", "none", 4, 1},
                                           Case{"qwen3_moe", "none", 4, 4},
                                           Case{"qwen2_moe", "none", 4, 2},
                                           Case{"mixtral", "fp8", 4, 2},
                                           Case{"deepseek_v3", "fp8-block", 4, 4},
                                           Case{"glm4_moe", "none", 4, 4}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.arch + "_" + info.param.quant;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(NodeRanksTest, NodesHoldContiguousBlocksAndMustDivideTheRanks) {
  EXPECT_EQ(node_ranks(8, 2, 1).first, 4);
  EXPECT_EQ(node_ranks(8, 2, 1).last, 8);
  EXPECT_EQ(node_ranks(6, 3, 0).last, 2);
  try {
    node_ranks(8, 3, 0);
    FAIL() << "3 nodes of 8 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.found(), "3");
  }
  EXPECT_THROW(node_ranks(128, 128, 0), Error);  // past kMaxNodes
  EXPECT_THROW(node_ranks(8, 2, 2), Error);
}

TEST(ReadAssignmentJsonTest, GivesEachNodesBytes) {
  TempDir dir;
  const Checkpoint ckpt = Checkpoint::open(make_model(dir, {"qwen3_moe", "none", 4, 4}));
  const Plan plan = plan_for(ckpt, {"qwen3_moe", "none", 4, 4});
  const nlohmann::json j = assign_reads(plan, 2, ReadPolicy::kStriped).to_json();
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["read"], "striped");
  ASSERT_EQ(j["per_node"].size(), 2u);
  EXPECT_EQ(j["per_node"][1]["ranks"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["per_node"][0]["bytes_read"].get<uint64_t>() +
                j["per_node"][1]["bytes_read"].get<uint64_t>(),
            j["bytes_needed"].get<uint64_t>());
}

}  // namespace
}  // namespace shardload
