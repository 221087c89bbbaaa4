#!/usr/bin/env bash
# Conversion throughput on one core against memcpy of the same output bytes
# (bench/convert_bench.cc).
# Builds nothing: `make bench` builds first; otherwise build the convert_bench target yourself.
#   bash bench/run_convert.sh [extra convert_bench / Google Benchmark flags]
# CONVERT_BENCH overrides the binary (default build/bench/convert_bench); BENCH_CPU picks the core
# it is pinned to (default the last one).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${CONVERT_BENCH:-build/bench/convert_bench}"
if [[ ! -x "$bin" ]]; then
  echo "run_convert.sh: $bin not found; build it first (make build)" >&2
  exit 1
fi

# One core, so that the thread does not migrate between runs; repetitions interleaved at random so
# that a busy spell on a shared machine does not land on one benchmark only.
pin=()
if command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "${BENCH_CPU:-$(($(nproc) - 1))}")
fi
exec "${pin[@]}" "$bin" --input_mib=256 --benchmark_repetitions=7 \
  --benchmark_enable_random_interleaving=true --benchmark_min_time=0.3 "$@"
