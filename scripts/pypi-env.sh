#!/usr/bin/env bash
# The Python environment of the real tools (transformers, llm-compressor, the official safetensors, ...),
# made from PyPI with the versions pinned in a lock file and cached outside the clone, keyed by the lock
# file's hash: a second run on the same machine downloads nothing. Prints the environment's python.
#   scripts/pypi-env.sh tests/producers/requirements.lock
# A second lock file lists packages installed after the first with --no-deps (SGLang's wheel requires
# CUDA-only packages it does not import to load a model); the key is then both files' hash.
#   scripts/pypi-env.sh tests/engines/requirements.lock tests/engines/requirements-nodeps.lock
# SHARDLOAD_PYPI_CACHE sets the cache (default ~/.cache/shardload/pypi). Debian's /usr/bin/python3 makes
# the environment (the python3 first on PATH may be another interpreter).
set -euo pipefail
lock=${1:?usage: scripts/pypi-env.sh LOCK_FILE [NO_DEPS_LOCK_FILE]}
nodeps=${2:-}
[ -f "$lock" ] || { echo "pypi-env: no lock file $lock" >&2; exit 2; }
[ -z "$nodeps" ] || [ -f "$nodeps" ] || { echo "pypi-env: no lock file $nodeps" >&2; exit 2; }
cache=${SHARDLOAD_PYPI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardload/pypi}
if [ -z "$nodeps" ]; then
  key=$(sha256sum "$lock" | cut -c1-16)
else
  key=$(cat "$lock" "$nodeps" | sha256sum | cut -c1-16)
fi
env_dir="$cache/$(basename "$lock" .lock)-$key"
if [ -x "$env_dir/bin/python" ] && [ -f "$env_dir/.complete" ]; then
  echo "$env_dir/bin/python"
  exit 0
fi
mkdir -p "$cache"
# Made under a temporary name and renamed when complete, so that an interrupted run is never reused.
work=$(mktemp -d "$cache/.making-XXXXXX")
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv "$work" >&2
PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/bin/python" -m pip install --quiet --cache-dir "$cache/pip" \
  -r "$lock" >&2
if [ -n "$nodeps" ]; then
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/bin/python" -m pip install --quiet --cache-dir "$cache/pip" \
    --no-deps -r "$nodeps" >&2
fi
touch "$work/.complete"
rm -rf "$env_dir"
mv "$work" "$env_dir"
trap - EXIT
echo "$env_dir/bin/python"
