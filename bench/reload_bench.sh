#!/usr/bin/env bash
# Expert reload of a ~2 GB MoE checkpoint from a second checkpoint in the page cache (issue 5): end-to-end GB/s
# of the changed bytes, the commit alone and the commit pause, beside a 2-thread memcpy between buffers already
# faulted in and a pread of the changed tensors out of the page cache (the source's limit), measured in the
# same process and interleaved (bench/reload_bench.cc). Layouts tp 1 and tp 4 x ep 2; double-buffered (the
# weight server's --double-buffer), staging kept between updates (the server's default otherwise, and the
# in-process LiveModel's), fresh staging per update, and a staging bound of 512 MiB (several commit groups).
#   bash bench/reload_bench.sh [MODEL_A] [MODEL_B]      (make build first)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/shardload
bench=build/bench/reload_bench
a="${1:-build/bench-moe-2g}"
b="${2:-build/bench-moe-2g-b}"
runs="${RUNS:-5}"
for tool in "$bin" "$bench"; do
  [[ -x "$tool" ]] || { echo "reload_bench.sh: $tool not found; run make build" >&2; exit 1; }
done
[[ -f "$a/config.json" ]] || "$bin" make-tiny --arch qwen3_moe --size "${SIZE:-2000000000}" --seed 1 --out "$a" --overwrite
[[ -f "$b/config.json" ]] || "$bin" make-tiny --arch qwen3_moe --size "${SIZE:-2000000000}" --seed 2 --out "$b" --overwrite
cat "$a"/*.safetensors "$b"/*.safetensors > /dev/null  # both in the page cache

for layout in "1 1" "4 2"; do
  read -r tp ep <<< "$layout"
  echo "== tp $tp x ep $ep, double-buffered (serve --double-buffer: read once into the spare, then a swap)"
  "$bench" "$a" "$b" --tp "$tp" --ep "$ep" --runs "$runs" --double-buffer 1 | tail -9
  echo "== tp $tp x ep $ep, staging kept between updates"
  "$bench" "$a" "$b" --tp "$tp" --ep "$ep" --runs "$runs" --keep-staging 1 | tail -9
  echo "== tp $tp x ep $ep, fresh staging per update"
  "$bench" "$a" "$b" --tp "$tp" --ep "$ep" --runs "$runs" | tail -9
  echo "== tp $tp x ep $ep, staging bound 512 MiB"
  "$bench" "$a" "$b" --tp "$tp" --ep "$ep" --runs "$runs" --staging-bytes 536870912 | tail -9
done
