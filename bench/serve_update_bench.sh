#!/usr/bin/env bash
# The weight server's expert update end to end, as an RL trainer sees it: POST /update_weights_from_disk
# with weight_name_filter ["mlp.experts."] on `shardload serve --double-buffer` (and, for comparison, the
# default single-buffered server), alternately from checkpoints B and A of a ~2 GB MoE in the page cache.
# Each update is interleaved with the limits measured in the same run: a 2-thread memcpy of the changed
# bytes between buffers already faulted in (bench/memcpy_limit --dest warm) and a 2-thread pread of the
# checkpoint's files out of the page cache (bench/pread_limit). One unmeasured update first. Prints per run the request's wall time (curl),
# the server's own stage / commit / pause figures, and the medians with their ratios.
#   bash bench/serve_update_bench.sh [MODEL_A] [MODEL_B]      (make build first; RUNS=5, TP=1, EP=1)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/shardload
a="$(realpath "${1:-build/bench-moe-2g}")"
b="$(realpath "${2:-build/bench-moe-2g-b}")"
runs="${RUNS:-5}"
tp="${TP:-1}"
ep="${EP:-1}"
for tool in "$bin" build/bench/memcpy_limit build/bench/pread_limit; do
  [[ -x "$tool" ]] || { echo "serve_update_bench.sh: $tool not found; run make build" >&2; exit 1; }
done
[[ -f "$a/config.json" ]] || "$bin" make-tiny --arch qwen3_moe --size 2000000000 --seed 1 --out "$a" --overwrite
[[ -f "$b/config.json" ]] || "$bin" make-tiny --arch qwen3_moe --size 2000000000 --seed 2 --out "$b" --overwrite
cat "$a"/*.safetensors "$b"/*.safetensors > /dev/null  # both in the page cache

work=$(mktemp -d)
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for mode in double single; do
  flags=()
  [[ "$mode" == double ]] && flags=(--double-buffer)
  "$bin" serve "$a" --tp "$tp" --ep "$ep" --name "bench-update-$$" --port 0 --threads 2 "${flags[@]}" \
    > "$work/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do grep -q "listening on" "$work/serve.log" && break; sleep 0.5; done
  port=$(grep -o 'listening on [^ ]*' "$work/serve.log" | sed 's/.*://')
  [[ -n "$port" ]] || { cat "$work/serve.log" >&2; exit 1; }
  auth="Authorization: Bearer $(cat "/dev/shm/shardload-bench-update-$$/api-key")"
  : > "$work/runs"
  # One update first, not measured: the staging area or the second slot, and the memory the VM backs
  # lazily, are faulted in once, as on a server that has run for a while.
  curl -s -H "$auth" "localhost:$port/update_weights_from_disk" \
    -d "{\"model_path\": \"$a\", \"weight_name_filter\": [\"mlp.experts.\"]}" > /dev/null
  build/bench/memcpy_limit --bytes 1000000000 --prime
  for run in $(seq 0 $((runs - 1))); do
    model=$([[ $((run % 2)) == 0 ]] && echo "$b" || echo "$a")
    reply=$(curl -s -H "$auth" -w ' %{time_total}' "localhost:$port/update_weights_from_disk" \
      -d "{\"model_path\": \"$model\", \"weight_name_filter\": [\"mlp.experts.\"]}")
    seconds=${reply##* }
    bytes=$(grep -o '(\([0-9]*\) bytes)' <<< "$reply" | tr -dc 0-9)
    pause=$(grep -o 'longest pause [0-9.]*' <<< "$reply" | awk '{print $3}')
    read -r memcpy_gbs _ <<< "$(build/bench/memcpy_limit --bytes "$bytes" --threads 2 --dest warm)"
    read -r pread_gbs _ <<< "$(build/bench/pread_limit --threads 2 "$model"/*.safetensors)"
    gbs=$(awk -v b="$bytes" -v s="$seconds" 'BEGIN {printf "%.2f", b / s / 1e9}')
    echo "$gbs $memcpy_gbs $pread_gbs $pause" >> "$work/runs"
    echo "$mode run $run: $bytes bytes in $seconds s ($gbs GB/s), pause $pause ms; memcpy $memcpy_gbs GB/s," \
      "pread $pread_gbs GB/s"
  done
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
  e2e=$(cut -d' ' -f1 "$work/runs" | median)
  mem=$(cut -d' ' -f2 "$work/runs" | median)
  prd=$(cut -d' ' -f3 "$work/runs" | median)
  pause=$(cut -d' ' -f4 "$work/runs" | median)
  echo "== $mode-buffered server, tp $tp x ep $ep, medians of $runs: update $e2e GB/s end to end (request to reply)," \
    "$(awk -v x="$e2e" -v y="$mem" 'BEGIN {printf "%.2f", x / y}') of memcpy ($mem GB/s)," \
    "$(awk -v x="$e2e" -v y="$prd" 'BEGIN {printf "%.2f", x / y}') of pread ($prd GB/s); reader pause $pause ms"
done
