// `shardload support`: the support matrix (shardload/support.h) as a Markdown table with numbered
// notes, the form the README holds it in, or as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "shardload/support.h"

namespace shardload::cli {
namespace {

// Each distinct reason once, numbered in order of first use.
class Notes {
 public:
  std::string refs(const std::vector<std::string>& reasons) {
    std::string out;
    for (const std::string& reason : reasons) {
      auto [it, added] = numbers_.try_emplace(reason, texts_.size() + 1);
      if (added) texts_.push_back(reason);
      out += fmt::format("{}{}", out.empty() ? "" : ", ", it->second);
    }
    return out.empty() ? out : fmt::format(" ({})", out);
  }
  const std::vector<std::string>& texts() const { return texts_; }

 private:
  std::map<std::string, size_t> numbers_;
  std::vector<std::string> texts_;
};

// "ct-fp8-tensor, ct-fp8-channel" -> "ct-fp8-tensor/channel": formats of one family of spellings
// side by side stay short enough for a table cell.
std::string join_formats(const std::vector<std::string>& formats) {
  std::string out;
  std::string prefix;
  for (const std::string& format : formats) {
    const size_t dash = format.rfind('-');
    const std::string head = dash == std::string::npos ? "" : format.substr(0, dash + 1);
    if (!head.empty() && head == prefix) {
      out += fmt::format("/{}", format.substr(dash + 1));
      continue;
    }
    out += fmt::format("{}{}", out.empty() ? "" : ", ", format);
    prefix = head;
  }
  return out;
}

// One target's cell over the formats a family loads: "yes", "refused (n)", or its formats grouped
// by outcome and reasons, e.g. "bf16, fp8 (2); refused: fp8-block (3)".
std::string target_cell(const FamilySupport& family, size_t target, Notes& notes) {
  std::vector<std::pair<const SupportCell*, std::vector<std::string>>> groups;
  for (const FormatSupport& format : family.formats) {
    if (!format.loads.yes) continue;
    const SupportCell& cell = format.targets[target];
    auto same = [&](const auto& group) {
      return group.first->yes == cell.yes && group.first->reasons == cell.reasons;
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) it = groups.insert(groups.end(), {&cell, {}});
    it->second.push_back(format.format);
  }
  // Taken as is, then taken another way, then refused.
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    auto rank = [](const SupportCell& c) { return c.yes ? (c.reasons.empty() ? 0 : 1) : 2; };
    return rank(*a.first) < rank(*b.first);
  });
  if (groups.size() == 1) {
    const SupportCell& cell = *groups[0].first;
    return fmt::format("{}{}", cell.yes ? "yes" : "refused", notes.refs(cell.reasons));
  }
  std::string out;
  for (const auto& [cell, formats] : groups) {
    out +=
        fmt::format("{}{}{}{}", out.empty() ? "" : "; ",
                    cell->yes ? "" : "refused: ", join_formats(formats), notes.refs(cell->reasons));
  }
  return out;
}

void print_markdown(const std::vector<FamilySupport>& matrix) {
  Notes notes;
  std::string header = "| family | checkpoint formats |";
  std::string rule = "|---|---|";
  for (const SupportTarget& target : kSupportTargets) {
    header += fmt::format(" {} |", support_target_label(target));
    rule += "---|";
  }
  std::cout << header << "\n" << rule << "\n";
  for (const FamilySupport& family : matrix) {
    std::vector<std::string> loaded;
    for (const FormatSupport& format : family.formats) {
      if (format.loads.yes) loaded.push_back(format.format);
    }
    std::string line = fmt::format("| `{}` | {} |", family.family, join_formats(loaded));
    for (size_t t = 0; t < std::size(kSupportTargets); ++t)
      line += fmt::format(" {} |", target_cell(family, t, notes));
    std::cout << line << "\n";
  }
  std::cout
      << "\nyes: taken. Formats with notes are taken once what the notes refuse is avoided; after "
         "\"refused\", the\nnote says why. `shardload support --json` gives every format's "
         "reasons.\n\n";
  for (size_t i = 0; i < notes.texts().size(); ++i)
    std::cout << fmt::format("{}. {}\n", i + 1, notes.texts()[i]);
}

nlohmann::json cell_json(const SupportCell& cell) {
  return {{"yes", cell.yes}, {"reasons", cell.reasons}};
}

void print_json(const std::vector<FamilySupport>& matrix) {
  nlohmann::json families = nlohmann::json::array();
  for (const FamilySupport& family : matrix) {
    nlohmann::json formats = nlohmann::json::array();
    for (const FormatSupport& format : family.formats) {
      nlohmann::json row = {{"format", format.format}, {"loads", cell_json(format.loads)}};
      for (size_t t = 0; t < format.targets.size(); ++t) {
        row["targets"][support_target_label(kSupportTargets[t])] = cell_json(format.targets[t]);
      }
      formats.push_back(std::move(row));
    }
    families.push_back({{"family", family.family}, {"formats", std::move(formats)}});
  }
  std::cout << nlohmann::json{{"families", std::move(families)}}.dump(1) << "\n";
}

}  // namespace

void add_support_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "support", "Print which family loads in which format and reaches which vLLM / SGLang target");
  cmd->add_flag("--json", *json,
                "One JSON object: per family and format, each target's yes and reasons");
  cmd->footer("Example: shardload support --json");
  cmd->callback([json] {
    const std::vector<FamilySupport> matrix = support_matrix();
    if (*json) {
      print_json(matrix);
    } else {
      print_markdown(matrix);
    }
  });
}

}  // namespace shardload::cli
