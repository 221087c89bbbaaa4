#!/usr/bin/env bash
# Distributed loads on this machine (docs/distributed.md): `mpirun -np 2` striped and local loads of
# the 2 GB checkpoint against, in the same run,
#   - the single-process load of the same layout (warm: files in the page cache; cold: evicted),
#   - MPI's own point-to-point bandwidth between the two processes (bench/mpi_bandwidth),
#   - the disk: fio, O_DIRECT sequential reads of the checkpoint's files at queue depth 32 (cold
#     loads are judged against it; the single-process cold load must reach 0.9x of it).
# Each case runs RUNS times (median). Times are each command's own report (open to weights in
# place), as bench/run times single-process loads; memory is primed before each. Writes
# bench/distributed_report.md.
#
#   RUNS=3 BIG_MODEL=/tmp/bench-big bash bench/distributed_bench.sh [--bin BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
[[ ${1:-} == --bin ]] && build=$2
shardload=$build/shardload
bandwidth=$build/bench/mpi_bandwidth
memcpy_limit=$build/bench/memcpy_limit
model=${BIG_MODEL:-/tmp/bench-big}
runs=${RUNS:-3}
layout=(--tp 8 --ep 8)
report=bench/distributed_report.md
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mpirun as root on one machine, two processes on however many cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v fio >/dev/null || { echo "installing fio" >&2; apt-get install -y -qq fio >/dev/null; }
[[ -x $bandwidth ]] || { echo "no $bandwidth: build with MPI (libopenmpi-dev)" >&2; exit 1; }
if [[ ! -f $model/config.json ]]; then
  "$shardload" make-tiny --arch qwen3_moe --size 2000000000 --seed 1 --out "$model"
fi
mapfile -t files < <(printf '%s\n' "$model"/*.safetensors)

evict() {
  "$python" -c 'import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "${files[@]}"
}
warm() { evict; cat "${files[@]}" >/dev/null; }
# Touch and free twice the checkpoint's size just before each measured process, as bench/run does: on
# a VM that hands freed pages back to the host, first touch after idle costs several times more.
prime() { "$memcpy_limit" --prime --bytes "$(du -cb "${files[@]}" | tail -1 | cut -f1)"; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.3f", b / s / 1e9}'; }

# single STATE: seconds of a single-process load; prints "seconds bytes_read".
single() {
  local out
  out=$("$shardload" load "$model" "${layout[@]}")
  local seconds bytes
  seconds=$(sed -n 's/.*total \([0-9.]*\) s$/\1/p' <<<"$out")
  bytes=$(sed -n 's/.*: read \([0-9]*\) bytes.*/\1/p' <<<"$out")
  echo "$seconds $bytes"
}
# nodes POLICY: seconds of an mpirun -np 2 load; prints "seconds bytes_needed received_max" and keeps the JSON.
nodes() {
  local json=$tmp/nodes-$1.json
  mpirun -np 2 "$shardload" load "$model" "${layout[@]}" --read "$1" --json >"$json"
  "$python" -c 'import json, sys
s = json.load(open(sys.argv[1]))
busiest = max(s["per_node"], key=lambda n: n["bytes_received"])
print(s["seconds"], s["bytes_needed"], busiest["bytes_received"], busiest["receive_gbps"])' "$json"
}

echo "distributed_bench: limits" >&2
# The disk varies from run to run on this VM: the median of RUNS fio runs.
fio_json=$("$python" - "$runs" "${files[@]}" <<'EOF'
import json, os, statistics, subprocess, sys
rates = []
for _ in range(int(sys.argv[1])):
    for path in sys.argv[2:]:
        fd = os.open(path, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
    out = subprocess.run(["fio", "--name=limit", "--readonly", "--direct=1", "--ioengine=io_uring",
                          "--iodepth=32", "--rw=read", "--bs=16M", "--filename=" + ":".join(sys.argv[2:]),
                          "--output-format=json"], check=True, capture_output=True, text=True).stdout
    rates.append(json.loads(out)["jobs"][0]["read"]["bw_bytes"] / 1e9)
print(statistics.median(rates))
EOF
)
fio_gbps=$(printf '%.3f' "$fio_json")
p2p=$(mpirun -np 2 "$bandwidth" | awk '{print $1}')

declare -A seconds
bytes_needed=0
received=0
receive_gbps=0
for state in warm cold; do
  for case in single striped local; do
    : >"$tmp/$case-$state"
    for ((run = 1; run <= runs; run++)); do
      if [[ $state == warm ]]; then warm; else evict; fi
      prime
      if [[ $case == single ]]; then
        read -r s b < <(single)
        bytes_needed=$b
      else
        read -r s b r g < <(nodes "$case")
        if [[ $case == striped && $state == warm ]]; then received=$r; receive_gbps=$g; fi
      fi
      echo "$s" >>"$tmp/$case-$state"
      echo "distributed_bench: $state $case run $run: $s s" >&2
    done
    seconds[$case-$state]=$(median <"$tmp/$case-$state")
  done
done

# Peak resident memory (warm, one run each): a node holds half the ranks plus its transfer buffers.
warm; prime
rss_single=$(/usr/bin/time -f "%M" "$shardload" load "$model" "${layout[@]}" 2>&1 >/dev/null | tail -1)
rss_nodes=()
for policy in striped local; do
  warm; prime
  # Each process writes its own figure to a file: the launcher may interleave the processes' stderr.
  mpirun -np 2 /bin/sh -c '/usr/bin/time -o "$0-$OMPI_COMM_WORLD_RANK" -f %M "$@" >/dev/null' "$tmp/rss-$policy" \
    "$shardload" load "$model" "${layout[@]}" --read "$policy"
  rss_nodes+=("$(cat "$tmp/rss-$policy"-* | sort -n | tail -1)")
done
rank_bytes=$("$shardload" plan "$model" "${layout[@]}" | awk '/^rank / {for (i = 1; i <= NF; i++) if ($i == "bytes,") s += $(i - 1)} END {print s}')

{
  echo "# Distributed loads on one machine (mpirun -np 2)"
  echo
  echo "Measured by \`RUNS=$runs BIG_MODEL=$model bash bench/distributed_bench.sh --bin $build\` at $(git rev-parse --short HEAD)"
  echo "on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); checkpoint: $model"
  echo "(qwen3_moe, $bytes_needed bytes needed), layout ${layout[*]}. Median of $runs runs; seconds are each"
  echo "command's own report, open to weights in place. Both processes share this machine's cores, memory"
  echo "bandwidth and disk: a second node adds no hardware here, so the ratios show the overhead of the"
  echo "distributed path, not a speed-up."
  echo
  echo "Limits measured in the same run:"
  echo "- disk: fio, O_DIRECT sequential reads of the checkpoint files, 16 MiB blocks (the loaders' read size), queue depth 32, median of $runs: $fio_gbps GB/s"
  echo "- MPI point-to-point, node 0 to node 1, 16 MiB messages, 8 in flight: $p2p GB/s"
  echo
  echo "| case | seconds | GB/s (needed bytes / s) | vs single process | vs limit |"
  echo "|---|---|---|---|---|"
  for state in warm cold; do
    single_s=${seconds[single-$state]}
    for case in single striped local; do
      s=${seconds[$case-$state]}
      rate=$(gbps "$bytes_needed" "$s")
      if [[ $state == cold ]]; then limit="$(ratio "$rate" "$fio_gbps") x fio"; else limit="-"; fi
      echo "| $state $case | $s | $rate | $(ratio "$single_s" "$s") | $limit |"
    done
  done
  echo
  striped_s=${seconds[striped-warm]}
  echo "Transfers, warm striped (last run): the node receiving most received $received bytes; its receive stage"
  echo "(bytes over the span during which receives were in flight) ran at $(printf "%.3f" "$receive_gbps") GB/s, $(ratio "$receive_gbps" "$p2p") x MPI's"
  echo "point-to-point bandwidth. The receives are posted early and wait on the sender's reads, so this"
  echo "is a floor on what the network carried; over the whole load: $(gbps "$received" "$striped_s") GB/s."
  echo
  cold_single=$(gbps "$bytes_needed" "${seconds[single-cold]}")
  verdict=FAIL
  awk -v a="$cold_single" -v b="$fio_gbps" 'BEGIN {exit !(a >= 0.9 * b)}' && verdict=PASS
  echo "Peak resident memory (KiB, /usr/bin/time, warm): single process ${rss_single}; the larger node: striped"
  echo "${rss_nodes[0]}, local ${rss_nodes[1]}. A node holds half of the ranks' $rank_bytes bytes; the single-node bound for"
  echo "them plus the transfer buffers (docs/distributed.md: at most 24 chunks of chunk size) is what a node may use."
  echo
  echo "| bound | measured | limit | verdict |"
  echo "|---|---|---|---|"
  echo "| single-process cold load >= 0.9 x fio qd32 | $cold_single GB/s | $(awk -v b="$fio_gbps" 'BEGIN {printf "%.3f", 0.9 * b}') GB/s | $verdict |"
} >"$report"
cat "$report"
