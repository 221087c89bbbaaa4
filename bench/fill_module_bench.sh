#!/usr/bin/env bash
# A rank into a torch module's tensors (an engine's parameters), through shardload.load_into (the staging
# ring straight into the tensors) beside the path it replaces in the engine plugins (shardload.load of the
# rank, then a copy into the tensors) and beside a plain copy of the rank's bytes between touched buffers
# (the memory-bandwidth limit) and into memory allocated for it (what a new rank buffer costs to fault in). Per mode: the fill's wall time and the process's peak resident memory
# above what it held with the module made. A Qwen3-MoE checkpoint of SIZE (make-tiny), tp 2, rank 0, in
# the page cache first; each mode three times, one process each.
#   bash bench/fill_module_bench.sh          (make build first; SIZE=2000000000)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/fill-module-XXXXXX")
trap 'rm -rf "$work"' EXIT
build/shardload make-tiny --arch qwen3_moe --size "${SIZE:-2000000000}" --out "$work/model" >/dev/null
cat "$work"/model/*.safetensors >/dev/null  # into the page cache
for _ in 1 2 3; do
  for mode in memcpy memcpy-fresh staged direct; do
    PYTHONPATH=build/python /usr/bin/python3 bench/fill_module.py "$work/model" "$mode" 2 0
  done
done
