#!/usr/bin/env bash
# `export --engine sglang --engine-post-processed` (FP8 weights transposed, scales reshaped) beside the
# export it extends, `export --engine vllm` of the same checkpoint (the layers as loaded, no transposition).
# A static per-tensor FP8 Llama of SIZE (make-tiny), tp 2, in the page cache first; each export
# three times, alternating, one process each: wall time and peak resident memory (/usr/bin/time).
#   bash bench/post_processed_export_bench.sh          (make build first; SIZE=1G)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/post-export-XXXXXX")
trap 'rm -rf "$work"' EXIT
build/shardload make-tiny --arch llama --quant fp8 --size "${SIZE:-1G}" --out "$work/model" >/dev/null
cat "$work"/model/*.safetensors >/dev/null  # into the page cache
for _ in 1 2 3; do
  for mode in as-loaded post-processed; do
    rm -rf "$work/out"
    if [ "$mode" = as-loaded ]; then flags=(--engine vllm); else flags=(--engine sglang --engine-post-processed); fi
    /usr/bin/time -f "$mode: %e s, peak %M KB" build/shardload export "$work/model" --tp 2 "${flags[@]}" \
      --out "$work/out" >/dev/null
  done
done
