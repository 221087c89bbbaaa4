#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "shardload/eplb.h"

namespace shardload::cli {
namespace {

struct EplbOptions {
  std::string load_file;
  EplbInput input;
};

// One layer per line: the maps stay readable for a person and are still one JSON document.
void print_rows(const char* key, const nlohmann::json& rows, bool last) {
  std::cout << fmt::format(" \"{}\": [", key);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::cout << (i == 0 ? "\n  " : ",\n  ") << rows[i].dump();
  }
  std::cout << (rows.empty() ? "]" : "\n ]") << (last ? "\n" : ",\n");
}

void run_eplb(EplbOptions options) {
  options.input.load = read_expert_load(options.load_file);
  const nlohmann::json out = to_json(rebalance_experts(options.input));
  std::cout << "{\n";
  print_rows("physical_to_logical_map", out["physical_to_logical_map"], false);
  print_rows("logical_to_physical_map", out["logical_to_physical_map"], false);
  print_rows("logical_count", out["logical_count"], true);
  std::cout << "}\n";
}

}  // namespace

void add_eplb_command(CLI::App& app) {
  auto options = std::make_shared<EplbOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eplb", "Place experts from load statistics with DeepSeek's EPLB (as SGLang and vLLM do)");
  cmd->footer("Example: shardload eplb --load expert_load.json --replicas 16 --gpus 4");
  cmd->add_option(
         "--load", options->load_file,
         "JSON file {\"expert_load\": [[...], ...]}, one row of expert loads per MoE layer")
      ->required();
  cmd->add_option("--replicas", options->input.replicas, "Physical experts per layer P")
      ->required();
  cmd->add_option("--groups", options->input.groups, "Expert groups G")->capture_default_str();
  cmd->add_option("--nodes", options->input.nodes, "Server nodes N")->capture_default_str();
  cmd->add_option("--gpus", options->input.gpus, "GPUs M (P is a multiple of M)")->required();
  cmd->callback([options] { run_eplb(*options); });
}

}  // namespace shardload::cli
