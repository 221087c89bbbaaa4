#!/usr/bin/env bash
# The GPU must-show of docs/gpu.md, in one run on a GPU machine (written for the lent H200: 16
# cores, no network, nothing installable), a few minutes in all:
#   1. build: Release with the tests (build-gpu/); where the machine lacks the C++ dependencies,
#      the binaries carried in .gpu-carry/ (made here by bench/gpu/prepare_carry.sh) instead;
#   2. the device tests (ctest label `device`: every family's GPU ranks byte for byte the host
#      load's, bf16, static FP8, dynamic FP8, block FP8, at tp 1 and tp 4 x ep 2 on one GPU) and the
#      host-side ring tests; the Python device tests where the package and a CUDA torch are there;
#   3. the same byte-identity through the command line (`load --checksum` on the host and on the
#      GPU), as a table;
#   4. `serve --device cuda` and a second process (gpu_ipc_client) opening its CUDA IPC handles,
#      checking the GPU bytes against host shared memory, then seeing an update in place;
#   5. the benchmark: pinned H2D bandwidth (the limit), page-cache read, disk read, and the load to
#      the GPU from the page cache and cold, as ratios (targets >= 0.8 and >= 0.9).
# Writes $OUT/gpu_report.md (the report) and $OUT/gpu_log.txt; prints the report last.
#   bash bench/gpu/run_device_checks.sh            (BENCH_BYTES=8000000000 by default; QUICK=1: 1 GB)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
REPORT=$OUT/gpu_report.md
LOG=$OUT/gpu_log.txt
: >"$LOG"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BUILD=${BUILD:-$ROOT/build-gpu}
BENCH_BYTES=${BENCH_BYTES:-8000000000}
[[ "${QUICK:-0}" == 1 ]] && BENCH_BYTES=1000000000
FAILS=0
START=$EPOCHREALTIME

log() { echo "$*" | tee -a "$LOG"; }
report() { echo "$*" >>"$REPORT"; }
fail() { FAILS=$((FAILS + 1)); log "FAIL: $*"; }
elapsed() { awk -v s="$START" -v e="$EPOCHREALTIME" 'BEGIN {printf "%.0f", e - s}'; }

echo "# GPU checks ($(date -u +%Y-%m-%dT%H:%MZ))" >"$REPORT"
report ""
report "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# The driver: libcuda.so.1 where the loader finds it (the lent machine mounts it under /usr/local/nvidia).
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/local/cuda/compat; do
    [[ -e $d/libcuda.so.1 ]] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
fi

# ---------------------------------------------------------------------------------------------
# 1. Build (or take the carried binaries).
BIN=""
TESTS=""
log "== build ($JOBS jobs)"
if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSHARDLOAD_TESTS=ON -DSHARDLOAD_BENCH=OFF \
    -DSHARDLOAD_DEMO_MODEL=OFF -DSHARDLOAD_MPI=OFF -DSHARDLOAD_CUDA=ON ${CMAKE_ARGS:-} >>"$LOG" 2>&1 &&
  cmake --build "$BUILD" -j"$JOBS" --target shardload shardload-serve device_cuda_test \
    device_staging_ring_test device_tensor_destinations_test device_cli_test gpu_h2d_limit gpu_ipc_client \
    gpu_pread_limit >>"$LOG" 2>&1; then
  BIN=$BUILD
  TESTS=$BUILD/tests
  TOOLS=$BUILD/bench
  cmake --build "$BUILD" -j"$JOBS" --target shardload_python >>"$LOG" 2>&1 || true
  PYPKG=$BUILD/python
  report "build: built here (Release, tests on) in $(elapsed) s"
elif [[ -x $ROOT/.gpu-carry/bin/shardload ]]; then
  # Binaries built on another machine (bench/gpu/prepare_carry.sh): their tests find the CLI at the
  # absolute path they were built with.
  BIN=$ROOT/.gpu-carry/bin
  TESTS=$BIN
  TOOLS=$BIN
  PYPKG=$ROOT/.gpu-carry/python
  export LD_LIBRARY_PATH=$ROOT/.gpu-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  built_at=$(cat "$ROOT/.gpu-carry/built_at" 2>/dev/null || true)
  if [[ -n $built_at && ! -e $built_at/shardload ]]; then
    mkdir -p "$(dirname "$built_at")" && ln -sfn "$BIN" "$built_at"
  fi
  report "build: the dependencies are missing here (see gpu_log.txt); ran the binaries carried in .gpu-carry/ ($(cat "$ROOT/.gpu-carry/commit" 2>/dev/null))"
else
  fail "no build and no .gpu-carry/ binaries"
  report "build: FAILED (see gpu_log.txt)"
  tail -40 "$LOG"
  exit 1
fi
SL=$BIN/shardload
"$SL" --version >>"$LOG" 2>&1 || fail "the shardload binary does not run"

# Models on a disk-backed file system (the cold load must read a disk, not tmpfs).
WORK=${WORK:-}
if [[ -z $WORK ]]; then
  for d in /var/tmp /root /tmp "$ROOT/.."; do
    if [[ -w $d && $(stat -f -c %T "$d" 2>/dev/null) != tmpfs ]]; then WORK=$d/shardload-gpu; break; fi
  done
  WORK=${WORK:-/tmp/shardload-gpu}
fi
mkdir -p "$WORK"
log "models in $WORK ($(stat -f -c %T "$WORK"))"

# ---------------------------------------------------------------------------------------------
# 2. Device tests.
report ""
report "## Device tests"
report ""
run_gtest() {  # NAME BINARY
  local name=$1 bin=$2 out
  out=$("$bin" --gtest_brief=0 2>&1)
  local rc=$?
  echo "$out" >>"$LOG"
  local passed skipped failed
  passed=$(echo "$out" | grep -c '^\[       OK \]')
  skipped=$(echo "$out" | grep -c '^\[  SKIPPED \]')
  failed=$(echo "$out" | grep -c '^\[  FAILED  \].*(')
  report "- $name: $passed passed, $skipped skipped, $failed failed (exit $rc)"
  [[ $rc == 0 ]] || fail "$name"
  [[ $name == device_cuda_test && $skipped -gt 0 ]] && fail "$name skipped tests on a GPU machine: $(echo "$out" | grep -m1 'needs a GPU')"
}
run_gtest device_cuda_test "$TESTS/device_cuda_test"
run_gtest device_staging_ring_test "$TESTS/device_staging_ring_test"
run_gtest device_cli_test "$TESTS/device_cli_test"
run_gtest device_tensor_destinations_test "$TESTS/device_tensor_destinations_test"
if [[ -d $PYPKG/shardload ]] && python3 -c 'import torch, pytest; assert torch.cuda.is_available()' 2>>"$LOG"; then
  if out=$(cd tests/python && PYTHONPATH=$PYPKG SHARDLOAD_BIN=$SL python3 -m pytest -q -p no:cacheprovider test_device.py -rs 2>&1); then
    report "- python test_device.py (torch $(python3 -c 'import torch; print(torch.__version__)')): $(echo "$out" | tail -1)"
  else
    report "- python test_device.py: FAILED: $(echo "$out" | tail -1)"
    fail "python test_device.py"
  fi
  echo "$out" >>"$LOG"
else
  report "- python test_device.py: not run (no Python package built here, or no CUDA torch)"
fi

# ---------------------------------------------------------------------------------------------
# 3. Byte-identity through the command line.
report ""
report "## GPU ranks against the host load (\`load --checksum\`, every tensor's XXH3)"
report ""
report "| family | weights | layout | tensors | identical |"
report "| --- | --- | --- | --- | --- |"
for spec in "qwen3_moe none" "qwen3_moe fp8" "deepseek_v3 fp8-block" "llama fp8"; do
  read -r arch quant <<<"$spec"
  model=$WORK/$arch-$quant
  "$SL" make-tiny --arch "$arch" --quant "$quant" --seed 3 --out "$model" --overwrite >>"$LOG" 2>&1
  for layout in "--tp 1" "--tp 4 --ep 2"; do
    [[ $arch == llama && $layout == "--tp 4 --ep 2" ]] && layout="--tp 4"
    # shellcheck disable=SC2086
    host=$("$SL" load "$model" $layout --checksum 2>>"$LOG" | grep -v '^loaded')
    n=$(echo "$layout" | awk '{print ($2 == 1) ? 1 : $2}')
    map=$(seq -s, 0 $((n - 1)) | sed 's/[0-9]*/0/g')
    # shellcheck disable=SC2086
    dev=$("$SL" load "$model" $layout --checksum --device cuda --device-map "$map" 2>>"$LOG" | grep -v '^loaded')
    same=no
    [[ -n $host && $host == "$dev" ]] && same=yes
    [[ $same == yes ]] || fail "checksums differ: $arch $quant $layout"
    report "| $arch | $quant | ${layout//--/} (one GPU) | $(echo "$host" | grep -c .) | $same |"
  done
done

# ---------------------------------------------------------------------------------------------
# 4. serve --device cuda and a second process through CUDA IPC.
report ""
report "## Weight server on the GPU, read by another process through CUDA IPC"
report ""
m1=$WORK/ipc-a
m2=$WORK/ipc-b
"$SL" make-tiny --arch qwen3_moe --seed 1 --out "$m1" --overwrite >>"$LOG" 2>&1
"$SL" make-tiny --arch qwen3_moe --seed 2 --out "$m2" --overwrite >>"$LOG" 2>&1
name=gpucheck$$
"$SL" serve "$m1" --tp 2 --ep 2 --device cuda --device-map 0,0 --name "$name" --port 0 >"$WORK/serve.out" 2>&1 &
serve_pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$WORK/serve.out")
  [[ -n $port ]] && break
  kill -0 $serve_pid 2>/dev/null || break
  sleep 0.1
done
cat "$WORK/serve.out" >>"$LOG"
if [[ -z $port ]]; then
  fail "serve --device cuda did not start"
  report "serve --device cuda: did not start: $(tail -2 "$WORK/serve.out")"
else
  dir=/dev/shm/shardload-$name
  version=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['version'])" "$dir/manifest.json" 2>/dev/null ||
    sed -n 's/.*"version": *\([0-9]*\).*/\1/p' "$dir/manifest.json" | head -1)
  "$TOOLS/gpu_ipc_client" "$dir" --wait-version $((version + 1)) --timeout 60 >"$WORK/client.out" 2>&1 &
  client_pid=$!
  for _ in $(seq 1 300); do grep -q waiting "$WORK/client.out" && break; sleep 0.1; done
  body="{\"model_path\": \"$m2\"}"
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'POST /update_weights_from_disk HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$(cat "$dir/api-key")" "${#body}" "$body" >&3
  answer=$(cat <&3)
  exec 3>&-
  echo "$answer" >>"$LOG"
  wait $client_pid
  client_rc=$?
  cat "$WORK/client.out" >>"$LOG"
  report '```'
  sed -n '1,20p' "$WORK/client.out" >>"$REPORT"
  report '```'
  report "update answer: $(echo "$answer" | tail -1 | cut -c1-200)"
  [[ $client_rc == 0 ]] || fail "the IPC client (exit $client_rc)"
  kill $serve_pid 2>/dev/null
  wait $serve_pid 2>/dev/null
fi

# ---------------------------------------------------------------------------------------------
# 5. Benchmark.
report ""
report "## Benchmark: loading to the GPU ($BENCH_BYTES-byte qwen3_moe bf16 checkpoint, tp 1)"
report ""
big=$WORK/bench-moe
if [[ ! -f $big/config.json ]]; then
  "$SL" make-tiny --arch qwen3_moe --size "$BENCH_BYTES" --seed 1 --out "$big" --overwrite >>"$LOG" 2>&1 ||
    fail "make-tiny of the benchmark model"
fi
files=("$big"/*.safetensors)
evict() {
  sync
  echo 1 >/proc/sys/vm/drop_caches 2>/dev/null ||
    python3 -c '
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "${files[@]}"
}
warm() { cat "${files[@]}" >/dev/null; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.2f", (s > 0) ? b / s / 1e9 : 0}'; }
json_field() { sed -n "s/^ *\"$1\": *\"\\{0,1\\}\\([^,\"]*\\)\"\\{0,1\\},\\{0,1\\}$/\\1/p" | head -1; }
load_rate() {  # ARGS... -> "GB/s io seconds"
  local j
  j=$("$SL" load "$big" --tp 1 --threads "$JOBS" --json "$@" 2>>"$LOG")
  echo "$j" >>"$LOG"
  local bytes secs io
  bytes=$(echo "$j" | json_field bytes_written)
  secs=$(echo "$j" | json_field seconds_copy)
  io=$(echo "$j" | json_field io)
  echo "$(gbps "$bytes" "$secs") $io $secs"
}
best() { tr ' ' '\n' | grep . | sort -g | tail -1; }

h2d=$("$TOOLS/gpu_h2d_limit" --bytes $((2 << 30)) 2>>"$LOG" | cut -d' ' -f1)
warm
pc=""
for _ in 1 2 3; do pc+="$("$TOOLS/gpu_pread_limit" --threads "$JOBS" "${files[@]}" | cut -d' ' -f1) "; done
pc=$(echo "$pc" | best)
gw=""
hw=""
gw_io=""
for _ in 1 2 3; do
  warm
  read -r r io _ < <(load_rate --device cuda)
  gw+="$r "
  gw_io=$io
  read -r r _ _ < <(load_rate)
  hw+="$r "
done
gw=$(echo "$gw" | best)
hw=$(echo "$hw" | best)
disk=""
gc=""
gc_io=""
for _ in 1 2; do
  evict
  disk+="$("$TOOLS/gpu_pread_limit" --threads "$JOBS" "${files[@]}" | cut -d' ' -f1) "
  evict
  read -r r io _ < <(load_rate --device cuda)
  gc+="$r "
  gc_io=$io
done
disk=$(echo "$disk" | best)
gc=$(echo "$gc" | best)
limit=$(awk -v a="$h2d" -v b="$pc" 'BEGIN {print (a < b) ? a : b}')
warm_ratio=$(awk -v g="$gw" -v l="$limit" 'BEGIN {printf "%.2f", (l > 0) ? g / l : 0}')
cold_ratio=$(awk -v g="$gc" -v d="$disk" 'BEGIN {printf "%.2f", (d > 0) ? g / d : 0}')
report "| figure | GB/s | note |"
report "| --- | --- | --- |"
report "| pinned H2D copy (the limit) | $h2d | gpu_h2d_limit: one 2 GiB cuMemcpyHtoDAsync, best of 5 |"
report "| page-cache read | $pc | gpu_pread_limit, $JOBS threads, files cached, best of 3 |"
report "| disk read (cold) | $disk | gpu_pread_limit after dropping the page cache, best of 2 |"
report "| load to host memory, page cache | $hw | \`load --json\`, best of 3 |"
report "| **load to GPU, page cache** | **$gw** | io $gw_io; **$warm_ratio** of min(H2D, page-cache read) = $limit (target >= 0.8) |"
report "| **load to GPU, cold** | **$gc** | io $gc_io; **$cold_ratio** of the disk (target >= 0.9) |"
report ""
report "GB/s of a load: rank bytes written / the loader's seconds_copy (reads, post-processing and uploads, overlapped)."
awk -v r="$warm_ratio" 'BEGIN {exit !(r >= 0.8)}' || report "- below target: page-cache load to GPU at $warm_ratio"
awk -v r="$cold_ratio" 'BEGIN {exit !(r >= 0.9)}' || report "- below target: cold load to GPU at $cold_ratio"

report ""
report "Result: $FAILS check(s) failed; $(elapsed) s in all."
cat "$REPORT"
[[ $FAILS == 0 ]]
