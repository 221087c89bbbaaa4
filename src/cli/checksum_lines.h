#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardload/dtype.h"
#include "shardload/loader.h"
#include "shardload/tensor.h"

namespace shardload::cli {

// One rank's --checksum lines, sorted by tensor name: a checkpoint's plan order and an export's
// file order differ (a file's tensors are laid out by alignment), and a load of the two must print
// the same text.
struct ChecksumLines {
  std::vector<std::pair<std::string, std::string>> lines;  // name, line

  void add(int rank, const std::string& name, DType dtype, const Shape& shape,
           std::span<const std::byte> bytes) {
    lines.emplace_back(name, fmt::format("{}\t{}\t{}\t[{}]\t{}\n", rank, name, dtype_name(dtype),
                                         fmt::join(shape, ","), xxh3_hex(bytes)));
  }
  // The lines so far, sorted, as one text; then none.
  std::string take() {
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& [name, line] : lines) out += line;
    lines.clear();
    return out;
  }
  void print() { std::cout << take(); }
};

// Every exported tensor of a loaded rank, as --checksum lines.
inline std::string rank_checksums(const Plan& plan, const RankWeights& weights) {
  ChecksumLines checksums;
  for (const PlanParam& param : plan.ranks[static_cast<size_t>(weights.rank)].params) {
    if (!param.exported()) continue;
    const TensorView view = param_view(weights, param);
    checksums.add(weights.rank, param.name, view.dtype, view.shape, view.data);
  }
  return checksums.take();
}

}  // namespace shardload::cli
