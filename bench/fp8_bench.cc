// FP8 post-processing throughput on one core, beside memcpy of the same output bytes in the same run:
//   Requantize: e4m3 codes from one scale to another in place (static FP8 fused layers, MoE w13);
//   QuantizeDynamic: float32 weights to e4m3 codes with a per-tensor scale (--quantization fp8), which also
//                    reads 4 bytes per code (its input rate is reported as in_bytes_per_second).
// Rates are output bytes per second. bench/run_fp8.sh runs it with interleaved repetitions.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "shardload/convert.h"
#include "shardload/fp8_quant.h"
#include "shardload/tensor.h"

namespace shardload {
namespace {

constexpr size_t kCodes = size_t{64} << 20;  // 64 MiB of codes: past the caches

struct Buffers {
  AlignedBuffer codes{kCodes};
  AlignedBuffer copy{kCodes};
  AlignedBuffer weights{kCodes * sizeof(float)};
  Buffers() {
    std::mt19937 rng(1);
    std::normal_distribution<float> weight(0.0f, 0.02f);
    auto* w = reinterpret_cast<float*>(weights.data());
    for (size_t i = 0; i < kCodes; ++i) w[i] = weight(rng);
    quantize_fp8_e4m3({w, kCodes}, {reinterpret_cast<uint8_t*>(codes.data()), kCodes});
    std::memset(copy.data(), 1, kCodes);
  }
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

void Memcpy(benchmark::State& state) {
  Buffers& b = buffers();
  for (auto _ : state) {
    std::memcpy(b.copy.data(), b.codes.data(), kCodes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kCodes));
}

void Requantize(benchmark::State& state) {
  Buffers& b = buffers();
  std::span<uint8_t> codes{reinterpret_cast<uint8_t*>(b.codes.data()), kCodes};
  bool up = true;
  for (auto _ : state) {
    // Alternating directions keeps the codes spread over the range run after run.
    requantize_fp8_e4m3(codes, up ? 1.0f : 1.5f, up ? 1.5f : 1.0f);
    up = !up;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kCodes));
}

void QuantizeDynamic(benchmark::State& state) {
  Buffers& b = buffers();
  const std::span<const float> weights{reinterpret_cast<const float*>(b.weights.data()), kCodes};
  std::span<uint8_t> codes{reinterpret_cast<uint8_t*>(b.copy.data()), kCodes};
  for (auto _ : state) {
    benchmark::DoNotOptimize(quantize_fp8_e4m3(weights, codes));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kCodes));
  state.counters["in_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kCodes * sizeof(float)), benchmark::Counter::kIsRate);
}

BENCHMARK(Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Requantize)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(QuantizeDynamic)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace shardload

BENCHMARK_MAIN();
