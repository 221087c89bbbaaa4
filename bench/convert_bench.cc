// Single-core throughput of the bulk conversions a checkpoint load spends its time in, each
// measured beside memcpy of the same number of output bytes between the same buffers, in the same
// run. Rates are output bytes per CPU second (time slicing on a busy machine does not count against
// either). After the runs a table compares each conversion with its memcpy, best and median over
// the repetitions; the exit status is 1 when a best ratio is below --min_ratio (default 0.5).
//
//   convert_bench [--input_mib=256] [--min_ratio=0.5] [Google Benchmark flags]
//
// bench/run_convert.sh runs it with repetitions interleaved at random.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "shardload/convert.h"
#include "shardload/dtype.h"
#include "shardload/tensor.h"

namespace shardload {
namespace {

struct Case {
  std::string name;
  DType from;
  DType to;
};

const Case kCases[] = {
    {"bf16_to_f32", DType::kBF16, DType::kF32},
    {"f32_to_bf16", DType::kF32, DType::kBF16},
    {"bf16_to_fp8e4m3", DType::kBF16, DType::kF8E4M3},
    {"fp8e4m3_to_bf16", DType::kF8E4M3, DType::kBF16},
};

size_t g_input_bytes = size_t{256} << 20;

size_t element_size(DType dtype) { return dtype_bits(dtype) / 8; }

// Source values shaped like weights: normally distributed around 0, a few times larger than FP8's
// smallest normal so that every conversion path (normal, subnormal, saturated) is taken.
void fill_source(DType dtype, std::byte* data, size_t n) {
  constexpr size_t kPattern = 1 << 16;
  std::mt19937 rng(1);
  std::normal_distribution<float> weight(0.0f, 2.0f);
  std::vector<float> values(kPattern);
  for (float& v : values) v = weight(rng);
  const size_t size = element_size(dtype);
  std::vector<std::byte> pattern(kPattern * size);
  convert(DType::kF32, values.data(), dtype, pattern.data(), kPattern);
  for (size_t i = 0; i < n; i += kPattern) {
    const size_t count = std::min(kPattern, n - i);
    std::memcpy(data + i * size, pattern.data(), count * size);
  }
}

// One source buffer per source dtype, holding g_input_bytes of input and long enough for memcpy to
// copy the largest output out of it, and one destination for all. All are allocated before the
// first run, so that runs of different cases can interleave; AlignedBuffer zero-fills, which faults
// every page in before any timing.
struct Buffers {
  std::map<DType, AlignedBuffer> src;
  AlignedBuffer dst;
};

Buffers& buffers() {
  static Buffers* const buffers = [] {
    size_t largest_output = 0;
    for (const Case& c : kCases) {
      largest_output =
          std::max(largest_output, g_input_bytes / element_size(c.from) * element_size(c.to));
    }
    auto* b = new Buffers;
    for (const Case& c : kCases) {
      if (b->src.contains(c.from)) continue;
      AlignedBuffer& src = b->src[c.from];
      src = AlignedBuffer(std::max(g_input_bytes, largest_output));
      fill_source(c.from, src.data(), g_input_bytes / element_size(c.from));
    }
    b->dst = AlignedBuffer(largest_output);
    return b;
  }();
  return *buffers;
}

size_t elements(const Case& c) { return g_input_bytes / element_size(c.from); }
size_t output_bytes(const Case& c) { return elements(c) * element_size(c.to); }

void run_convert(benchmark::State& state, const Case& c) {
  Buffers& b = buffers();
  const std::byte* src = b.src.at(c.from).data();
  for (auto _ : state) {
    convert(c.from, src, c.to, b.dst.data(), elements(c));
    benchmark::DoNotOptimize(b.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * output_bytes(c)));
}

void run_memcpy(benchmark::State& state, const Case& c) {
  Buffers& b = buffers();
  const std::byte* src = b.src.at(c.from).data();
  for (auto _ : state) {
    std::memcpy(b.dst.data(), src, output_bytes(c));
    benchmark::DoNotOptimize(b.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * output_bytes(c)));
}

// Passes the console the aggregates of repeated benchmarks (or the single run) and keeps every
// run's rate for the summary.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      if (run.run_type == Run::RT_Iteration) {
        const auto rate = run.counters.find("bytes_per_second");
        if (rate != run.counters.end()) {
          rates_[run.run_name.function_name].push_back(rate->second.value);
        }
      }
      if (run.run_type == Run::RT_Aggregate || run.repetitions <= 1) shown.push_back(run);
    }
    if (!shown.empty()) ConsoleReporter::ReportRuns(shown);
  }

  // Prints the table; returns false when a conversion's best rate is below min_ratio times
  // memcpy's. Best of the repetitions, because on a shared machine every disturbance only slows a
  // run down; medians are beside it.
  bool summarize(double min_ratio) const {
    bool ok = true;
    std::printf("\n%-16s %11s %11s %7s   %11s %11s %7s\n", "", "best", "", "", "median", "", "");
    std::printf("%-16s %11s %11s %7s   %11s %11s %7s\n", "conversion", "convert", "memcpy", "ratio",
                "convert", "memcpy", "ratio");
    for (const Case& c : kCases) {
      const auto convert_rates = rates_.find("convert/" + c.name);
      const auto memcpy_rates = rates_.find("memcpy/" + c.name);
      if (convert_rates == rates_.end() || memcpy_rates == rates_.end()) continue;
      const double best_convert = best(convert_rates->second);
      const double best_memcpy = best(memcpy_rates->second);
      const double median_convert = median(convert_rates->second);
      const double median_memcpy = median(memcpy_rates->second);
      const bool pass = best_convert >= min_ratio * best_memcpy;
      ok = ok && pass;
      std::printf("%-16s %11.2f %11.2f %7.2f   %11.2f %11.2f %7.2f  %s\n", c.name.c_str(),
                  best_convert / 1e9, best_memcpy / 1e9, best_convert / best_memcpy,
                  median_convert / 1e9, median_memcpy / 1e9, median_convert / median_memcpy,
                  pass ? "ok" : "BELOW");
    }
    std::printf(
        "GB/s of output (1e9 bytes), one thread, CPU time; ratio = convert / memcpy of the same\n"
        "output bytes between the same buffers; required: best ratio >= %.2f\n",
        min_ratio);
    return ok;
  }

 private:
  static double best(const std::vector<double>& rates) {
    return *std::max_element(rates.begin(), rates.end());
  }
  static double median(std::vector<double> rates) {
    std::sort(rates.begin(), rates.end());
    const size_t mid = rates.size() / 2;
    return rates.size() % 2 == 1 ? rates[mid] : (rates[mid - 1] + rates[mid]) / 2;
  }

  std::map<std::string, std::vector<double>> rates_;
};

}  // namespace
}  // namespace shardload

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  double min_ratio = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--input_mib=")) {
      shardload::g_input_bytes = std::strtoull(argv[i] + 12, nullptr, 10) << 20;
    } else if (arg.starts_with("--min_ratio=")) {
      min_ratio = std::strtod(argv[i] + 12, nullptr);
    } else {
      std::fprintf(stderr, "convert_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  for (const shardload::Case& c : shardload::kCases) {
    benchmark::RegisterBenchmark(("memcpy/" + c.name).c_str(), shardload::run_memcpy, c)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("convert/" + c.name).c_str(), shardload::run_convert, c)
        ->Unit(benchmark::kMillisecond);
  }
  shardload::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return reporter.summarize(min_ratio) ? 0 : 1;
}
