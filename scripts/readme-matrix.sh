#!/usr/bin/env bash
# Writes `shardload support`'s output into README.md between its support-matrix markers, which
# tests/cli/readme_matrix_test.cc holds equal to it. Usage: scripts/readme-matrix.sh [BINARY [README]]
# (`make readme-matrix` runs it with build/shardload).
set -euo pipefail
bin=${1:-build/shardload}
readme=${2:-README.md}
begin='<!-- support-matrix: begin'
end='<!-- support-matrix: end'
if ! grep -q "^$begin" "$readme" || ! grep -q "^$end" "$readme"; then
  echo "error: $readme has no support-matrix markers ($begin ... -->, $end -->)" >&2
  exit 1
fi
matrix=$(mktemp)
trap 'rm -f "$matrix" "$readme.tmp"' EXIT
"$bin" support >"$matrix"
awk -v matrix="$matrix" -v begin="^$begin" -v end="^$end" '
  $0 ~ begin { print; while ((getline line < matrix) > 0) print line; skip = 1; next }
  $0 ~ end { skip = 0 }
  !skip { print }' "$readme" >"$readme.tmp"
mv "$readme.tmp" "$readme"
trap 'rm -f "$matrix"' EXIT
