// Header parsing speed: a 20k-tensor MoE header (~2 MB of JSON), in offset order and reversed (which makes
// the parser sort and re-index).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "shardload/safetensors.h"

namespace {

std::string header_file(bool reversed) {
  constexpr size_t kCount = 20'000;
  std::vector<std::string> entries;
  for (size_t i = 0; i < kCount; ++i) {
    entries.push_back(fmt::format(
        R"("model.layers.{}.mlp.experts.{}.down_proj.weight":{{"dtype":"BF16","shape":[2,4],"data_offsets":[{},{}]}})",
        i / 128, i % 128, 16 * i, 16 * (i + 1)));
  }
  if (reversed) std::reverse(entries.begin(), entries.end());
  const std::string json = fmt::format("{{{}}}", fmt::join(entries, ","));
  std::string file(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(file.data(), &n, 8);
  return file + json + std::string(16 * kCount, '\0');
}

void BM_ParseHeader20k(benchmark::State& state) {
  const std::string file = header_file(state.range(0) != 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(shardload::parse_safetensors_header(
        std::as_bytes(std::span(file.data(), file.size())), file.size()));
  }
  state.SetItemsProcessed(state.iterations() * 20'000);
}
BENCHMARK(BM_ParseHeader20k)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
