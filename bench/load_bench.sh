#!/usr/bin/env bash
# Warm load (page cache) of a ~2 GB MoE checkpoint at tp 1 and tp 4 x ep 2 (all ranks), whole process wall
# clock, beside the limit measured in the same run: a 2-thread memcpy of the same bytes into a freshly mapped
# destination advised for huge pages, page faults included. Limit and load runs are interleaved; medians of
# RUNS (default 5). Also reports the same copy into 4 KiB pages and the change in thp_fault_alloc.
#
# Every measured process (limit or load) is preceded by `memcpy_limit --prime`, which touches and frees twice
# the bytes: on a VM whose balloon returns freed guest memory to the host, the first touch of memory after a
# few idle seconds costs ~10x more, and without priming whichever process ran second would win. COLD_RUNS
# (default 2) more pairs are measured after SETTLE seconds of idle instead (memory handed back to the host),
# and reported on their own line.
#   bash bench/load_bench.sh [MODEL_DIR]      (make bench-load builds first)
# QUANT=ct-w4a16 makes the default model with llm-compressor's W4A16 integer weights (make-tiny --quant), in
# build/bench-moe-2g-ct-w4a16.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/shardload
limit=build/bench/memcpy_limit
quant="${QUANT:-none}"
model="${1:-build/bench-moe-2g$([[ $quant == none ]] || echo "-$quant")}"
runs="${RUNS:-5}"
cold_runs="${COLD_RUNS:-2}"
settle="${SETTLE:-6}"
for tool in "$bin" "$limit"; do
  [[ -x "$tool" ]] || { echo "load_bench.sh: $tool not found; run make build" >&2; exit 1; }
done
if [[ ! -f "$model/config.json" ]]; then
  "$bin" make-tiny --arch qwen3_moe --size "${SIZE:-2000000000}" --quant "$quant" --out "$model" --overwrite
fi
cat "$model"/*.safetensors > /dev/null  # into the page cache: this is the warm case

thp() { awk '$1 == "thp_fault_alloc" {print $2}' /proc/vmstat; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# Bytes a layout loads (the rank allocations), from the loader's own summary.
loaded_bytes() { "$bin" load "$model" "$@" --threads 2 | sed -n 's/.*wrote \([0-9]*\) bytes.*/\1/p'; }

declare -A bytes=([tp1]=$(loaded_bytes --tp 1) [tp4ep2]=$(loaded_bytes --tp 4 --ep 2))
declare -A args=([tp1]="--tp 1" [tp4ep2]="--tp 4 --ep 2")
declare -A rates limits rss thp_delta cold_rates cold_limits

# prepare STATE LAYOUT: prime host memory, or let it settle back to the host.
prepare() {
  if [[ "$1" == primed ]]; then "$limit" --prime --bytes "${bytes[$2]}"; else sleep "$settle"; fi
}

# measure STATE LAYOUT: one limit run then one load run, each after prepare.
measure() {
  local state=$1 layout=$2 lim start end before rate
  prepare "$state" "$layout"
  lim=$("$limit" --bytes "${bytes[$layout]}" --threads 2 --dest huge | cut -d' ' -f1)
  prepare "$state" "$layout"
  before=$(thp)
  start=$EPOCHREALTIME  # bash's own clock: no extra process inside the timed span
  # shellcheck disable=SC2086
  "$bin" load "$model" ${args[$layout]} --threads 2 > /dev/null
  end=$EPOCHREALTIME
  rate=$(awk -v b="${bytes[$layout]}" -v s="$start" -v e="$end" 'BEGIN {printf "%.3f", b / (e - s) / 1e9}')
  if [[ "$state" == primed ]]; then
    limits[$layout]+="$lim "
    rates[$layout]+="$rate "
    thp_delta[$layout]+="$(( $(thp) - before )) "
  else
    cold_limits[$layout]+="$lim "
    cold_rates[$layout]+="$rate "
  fi
}

for run in $(seq "$runs"); do
  for layout in tp1 tp4ep2; do measure primed "$layout"; done
done
for run in $(seq "$cold_runs"); do
  for layout in tp1 tp4ep2; do measure cold "$layout"; done
done
# Peak RSS from separate runs under /usr/bin/time (outside the timed runs: GNU time adds a process).
for layout in tp1 tp4ep2; do
  for run in $(seq "$runs"); do
    # shellcheck disable=SC2086
    /usr/bin/time -f "%M" -o /tmp/shardload-bench-rss "$bin" load "$model" ${args[$layout]} --threads 2 > /dev/null
    rss[$layout]+="$(cat /tmp/shardload-bench-rss) "
  done
done
small_pages=""
for run in $(seq "$runs"); do
  prepare primed tp1
  small_pages+="$("$limit" --bytes "${bytes[tp1]}" --threads 2 --dest 4k | cut -d' ' -f1) "
done

echo "model: $model ($(du -sb "$model" | cut -f1) bytes on disk), runs: $runs primed + $cold_runs cold, $(nproc) cores"
printf '%-8s %12s %10s %10s %7s %12s %14s %12s\n' layout bytes load_GB/s limit_GB/s ratio peak_rss_MiB rss_limit_MiB thp_faults
for layout in tp1 tp4ep2; do
  load=$(median <<< "${rates[$layout]}")
  lim=$(median <<< "${limits[$layout]}")
  peak=$(tr ' ' '\n' <<< "${rss[$layout]}" | grep . | sort -g | tail -1)
  faults=$(median <<< "${thp_delta[$layout]}")
  awk -v l="$layout" -v b="${bytes[$layout]}" -v r="$load" -v m="$lim" -v p="$peak" -v f="$faults" 'BEGIN {
    printf "%-8s %12d %10.2f %10.2f %7.2f %12.0f %14.0f %12d\n", l, b, r, m, r / m, p / 1024,
           (1.1 * b + 256 * 1048576) / 1048576, f }'
done
echo "4 KiB-page destination memcpy (same bytes as tp1), median GB/s: $(median <<< "$small_pages")"
echo "all load GB/s: tp1 [${rates[tp1]}] tp4ep2 [${rates[tp4ep2]}]"
echo "all limits:    tp1 [${limits[tp1]}] tp4ep2 [${limits[tp4ep2]}]"
for layout in tp1 tp4ep2; do
  (( cold_runs > 0 )) || break  # COLD_RUNS=0: no cold pairs were measured
  awk -v l="$layout" -v r="$(median <<< "${cold_rates[$layout]}")" -v m="$(median <<< "${cold_limits[$layout]}")" \
    'BEGIN {printf "cold (after idle, memory back at the host) %-7s load %.2f GB/s, limit %.2f GB/s, ratio %.2f\n", l, r, m, r / m}'
done
