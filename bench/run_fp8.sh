#!/usr/bin/env bash
# FP8 requantization and dynamic quantization beside memcpy of the same output bytes, one pinned core,
# repetitions interleaved at random (bench/fp8_bench.cc). `make build` first.
#   bash bench/run_fp8.sh [Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${FP8_BENCH:-build/bench/fp8_bench}"
[[ -x "$bin" ]] || { echo "run_fp8.sh: $bin not found; run make build" >&2; exit 1; }
pin=()
if command -v taskset >/dev/null 2>&1; then pin=(taskset -c "${BENCH_CPU:-$(($(nproc) - 1))}"); fi
exec "${pin[@]}" "$bin" --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true "$@"
