#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace shardload {

// The input of DeepSeek's EPLB (`rebalance_experts`): per-layer expert loads and the deployment.
struct EplbInput {
  // [layers][logical experts], converted to float32 before use.
  std::vector<std::vector<double>> load;
  int replicas = 0;  // P: physical experts per layer
  int groups = 1;    // G: expert groups
  int nodes = 1;     // N: server nodes
  int gpus = 1;      // M: GPUs in all
};

// One row per MoE layer, as the reference returns them (and as SGLang / vLLM consume them).
struct EplbResult {
  std::vector<std::vector<int>> physical_to_logical_map;  // [layers][P]
  // [layers][E][X]: physical ids of each logical expert by replica rank, -1 padded to X, the
  // largest replica count over all layers.
  std::vector<std::vector<std::vector<int>>> logical_to_physical_map;
  std::vector<std::vector<int>> logical_count;  // [layers][E]
};

// Keeps the O(P x E) replication and the P-sized maps bounded for requests from outside.
inline constexpr int kEplbMaxReplicas = 1 << 16;

// Whether `input` gets the hierarchical policy, G % N == 0 (groups are packed onto nodes first).
bool eplb_is_hierarchical(const EplbInput& input);

// Checks every precondition (shapes, loads, divisibility) without placing anything. Throws
// Error(kInvalidArgument) naming what was expected and what was found.
void validate_eplb_input(const EplbInput& input);

// The DeepSeek EPLB placement, bit-for-bit in its tie-breaking (float32 loads). Validates first.
EplbResult rebalance_experts(const EplbInput& input);

// Reads the `expert_load` member of {"expert_load": [[...], ...]} (other members are ignored).
// Throws Error(kInvalidArgument) for malformed text or a member of the wrong shape.
std::vector<std::vector<double>> parse_expert_load(std::string_view json_text);

// parse_expert_load on a file's contents, with errors that name the file. Throws Error(kIo) when
// the file cannot be read.
std::vector<std::vector<double>> read_expert_load(const std::string& path);

// {"physical_to_logical_map": ..., "logical_to_physical_map": ..., "logical_count": ...}.
nlohmann::json to_json(const EplbResult& result);

}  // namespace shardload
