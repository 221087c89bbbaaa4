#!/usr/bin/env bash
# Builds the GPU checks' programs here (build-gpu/, the flags run_device_checks.sh uses) and packs
# them with the shared libraries they need that a CUDA image may lack (fmt, simdjson, xxhash,
# liburing, cpp-httplib's TLS and compression libraries) into .gpu-carry/ (ignored by git), for a
# GPU machine that cannot build them: name .gpu-carry in the device run's `carry`, and
# run_device_checks.sh takes these binaries when its own build fails. glibc, libstdc++ and libgcc
# stay the machine's (built here against older ones, the binaries run on newer).
#   bash bench/gpu/prepare_carry.sh        (JOBS=2 by default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=$ROOT/build-gpu
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSHARDLOAD_TESTS=ON -DSHARDLOAD_BENCH=OFF \
  -DSHARDLOAD_DEMO_MODEL=OFF -DSHARDLOAD_MPI=OFF -DSHARDLOAD_CUDA=ON ${CMAKE_ARGS:-} >/dev/null
programs=(shardload shardload-serve device_cuda_test device_staging_ring_test device_cli_test
          gpu_h2d_limit gpu_ipc_client gpu_pread_limit)
cmake --build "$BUILD" -j"$JOBS" --target "${programs[@]}"
C=$ROOT/.gpu-carry
rm -rf "$C"
mkdir -p "$C/bin" "$C/lib"
for p in "${programs[@]}"; do
  for f in "$BUILD/$p" "$BUILD/tests/$p" "$BUILD/bench/$p"; do
    [[ -x $f && -f $f ]] && cp "$f" "$C/bin/" && strip "$C/bin/$(basename "$f")" 2>/dev/null || true
  done
done
for f in "$C"/bin/*; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$C/lib/" ;;
  esac
done
echo "$BUILD" >"$C/built_at"  # where the tests look for the CLI (SHARDLOAD_BIN)
git rev-parse --short HEAD >"$C/commit"
du -sh "$C"
ls "$C/bin" "$C/lib"
