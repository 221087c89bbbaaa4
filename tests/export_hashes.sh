#!/usr/bin/env bash
# Prints one line per generated checkpoint and per export of it: a hash over all its files (the
# sha256 of each file, then of that sorted list). Run on two commits and compare the outputs: a
# refactoring that must not change behaviour gives identical lines (issue 21).
#
#   tests/export_hashes.sh [BINARY] [FAMILY...]
#
# BINARY defaults to build/shardload; the families default to every one make-tiny lists. Each
# family's checkpoint is generated for every --quant (none, fp8 with static and with dynamic
# activations, fp8-block) with a fixed seed, and exported under the layouts the tests use (tp 1, 2,
# 4 and 8, and for MoE tp 4 x ep 2 and 4, redundant experts, unsplit shared experts, casts, dynamic
# FP8, row-parallel biases divided), then with --engine vllm and --engine sglang at tp 2 and tp 2 x ep 2;
# llm-compressor's compressed-tensors FP8 (tensor, channel, block) and gpt-oss's MXFP4 experts too.
# A layout a model does not allow prints "refused".
set -euo pipefail

bin=${1:-build/shardload}
shift || true
if [[ $# -gt 0 ]]; then
  families=("$@")
else
  # "Architecture family: a, b, c" in make-tiny's help.
  mapfile -t families < <("$bin" make-tiny --help | sed -n 's/.*Architecture family: //p' |
                           tr -d ' ' | tr ',' '\n')
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

hash_dir() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

# label, checkpoint dir, export options
export_one() {
  local label=$1 model=$2
  shift 2
  rm -rf "$work/out"
  if "$bin" export "$model" --out "$work/out" --threads 2 "$@" >/dev/null 2>&1; then
    printf '%-44s %s\n' "$label" "$(hash_dir "$work/out")"
  else
    printf '%-44s refused\n' "$label"
  fi
}

layouts=(
  "tp1|--tp 1"
  "tp2|--tp 2"
  "tp4|--tp 4"
  "tp8|--tp 8"
  "tp2_fp16|--tp 2 --dtype fp16"
  "tp4_fp32|--tp 4 --dtype fp32"
  "tp2_dynfp8|--tp 2 --quantization fp8"
  "tp2_rowbias_divided|--tp 2 --row-bias divided"
  "tp4_ep2|--tp 4 --ep 2"
  "tp4_ep4|--tp 4 --ep 4"
  "tp4_ep2_redundant2|--tp 4 --ep 2 --redundant-experts 2"
  "tp4_ep2_no_split_shared|--tp 4 --ep 2 --no-split-shared-experts"
  "tp2_redundant2|--tp 2 --redundant-experts 2"
  "tp2_vllm|--tp 2 --engine vllm"
  "tp2_ep2_vllm|--tp 2 --ep 2 --engine vllm"
  "tp2_sglang|--tp 2 --engine sglang"
  "tp2_ep2_sglang|--tp 2 --ep 2 --engine sglang"
)

for family in "${families[@]}"; do
  for quant in none fp8 fp8-dynamic fp8-block ct-fp8-tensor ct-fp8-tensor-dynamic ct-fp8-channel \
               ct-fp8-block mxfp4; do
    ckpt="$work/$family-$quant"
    case $quant in
      fp8-dynamic) args=(--quant fp8 --activation-scheme dynamic) ;;
      ct-fp8-tensor-dynamic) args=(--quant ct-fp8-tensor --activation-scheme dynamic) ;;
      *) args=(--quant "$quant") ;;
    esac
    if ! "$bin" make-tiny --arch "$family" --out "$ckpt" --seed 7 "${args[@]}" >/dev/null 2>&1; then
      printf '%-44s refused\n' "$family/$quant/make-tiny"
      continue
    fi
    printf '%-44s %s\n' "$family/$quant/make-tiny" "$(hash_dir "$ckpt")"
    for layout in "${layouts[@]}"; do
      read -r -a options <<<"${layout#*|}"
      export_one "$family/$quant/${layout%%|*}" "$ckpt" "${options[@]}"
    done
    rm -rf "$ckpt"
  done
done
