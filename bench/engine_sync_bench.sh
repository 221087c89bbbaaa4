#!/usr/bin/env bash
# The engines with shardload, timed beside the engines' own means (issue 31), on CPU in the engines' PyPI
# environment (tests/engines/): vLLM 0.33's load_weights by its own loader and by --load-format shardload
# (from the checkpoint and from the weight server), then the RL sync of the live model after the server's
# /update_weights_from_disk beside vLLM's own in-place reload_weights from the new checkpoint, and after the
# server's /rebalance beside vLLM's own EPLB (rearrange_expert_weights_inplace over gloo). Two Qwen3-MoE
# checkpoints of SIZE (make-tiny), tp 2 x ep 2 (2 ranks, one thread each), both in the page cache first;
# each load three times, the sync once (every line is rank 0's own clock).
#   bash bench/engine_sync_bench.sh          (make build first; SIZE=1G)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${SIZE:-1G}
engines=$(bash scripts/pypi-env.sh tests/engines/requirements.lock tests/engines/requirements-nodeps.lock)
work=$(mktemp -d "${TMPDIR:-/tmp}/engine-sync-XXXXXX")
name="engine-sync-$$"
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$work" "/dev/shm/shardload-$name"
}
trap cleanup EXIT
build/shardload make-tiny --arch qwen3_moe --size "$size" --out "$work/first" >/dev/null
build/shardload make-tiny --arch qwen3_moe --size "$size" --seed 1234 --out "$work/second" >/dev/null
cat "$work"/first/*.safetensors "$work"/second/*.safetensors >/dev/null  # into the page cache
build/shardload serve "$work/first" --tp 2 --ep 2 --name "$name" --port 0 --threads 2 >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do grep -q 'listening on' "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log")
[ -n "$port" ] || { cat "$work/serve.log" >&2; exit 1; }
map=$(build/shardload plan "$work/second" --tp 2 --ep 2 --json | /usr/bin/python3 -c '
import json, sys
rows = json.load(sys.stdin)["physical_to_logical_map"]
print(json.dumps([row[::-1] for row in rows]))')
sync=$(printf '{"port": %s, "api_key": "%s", "model": "%s", "out": "%s", "own": "%s", "rebalance": {"map": %s, "out": "%s", "own": "%s"}}' \
  "$port" "$(cat "/dev/shm/shardload-$name/api-key")" "$work/second" "$work/synced" "$work/own-reloaded" "$map" "$work/rebalanced" "$work/own-rebalanced")
echo "Qwen3-MoE, make-tiny --size $size ($(du -sh "$work/first" | cut -f1) on disk), tp 2 x ep 2, $(nproc) cores"
# Each load three times, interleaved (the first of each pays for the engine's first model and the pages'
# first touch); then vLLM's own load of the second checkpoint and of the first again: --sync goes on with it.
loads=()
for _ in 1 2 3; do
  loads+=("$work/first:$work/own:auto:ep" "$work/first:$work/plugin:shardload:ep" "$work/first:$work/server:server=$name:ep")
done
env -u LD_PRELOAD -u ASAN_OPTIONS PYTHONPATH=build/python "$engines" tests/engines/vllm_ranks.py --tp 2 "${loads[@]}" \
  "$work/second:$work/second-own:auto:ep" "$work/first:$work/own:auto:ep" --sync "$sync" 2>&1 |
  grep -E "^(load|update|rebalance)"
