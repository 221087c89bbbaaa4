#!/usr/bin/env bash
# Installs the Debian packages shardload needs, and only those that are missing.
set -euo pipefail

packages=(
  cmake make ninja-build g++ pkg-config time curl
  ccache   # the sanitized build's compiler cache, shared between clones (Makefile: SHARDLOAD_CCACHE)
  nlohmann-json3-dev libsimdjson-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev liburing-dev libcpp-httplib-dev libre2-dev
  clang libclang-rt-14-dev   # the sanitized suite's compiler, and libFuzzer
  libopenmpi-dev openmpi-bin  # distributed loads over MPI (mpirun) and their tests
  # The Python package: its extension, its tests and `pip install .` into a venv.
  python3-dev pybind11-dev python3-pybind11 libdlpack-dev python3-numpy python3-torch python3-pytest
  python3-venv python3-pip python3-setuptools python3-wheel libxxhash0
  # OpenBLAS (one thread: ctest runs tests side by side) as libblas.so.3 through Debian's alternatives, in place
  # of the reference BLAS python3-torch gets otherwise: the verify tests' float64 matmuls ran 2 to 3 times longer.
  libopenblas0-serial
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
