"""Fixtures the Python tests share: the shardload binary and tiny checkpoints made with it."""
import json
import os
import pathlib
import subprocess

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "matrix: a cross-product case `make test-matrix` runs and `make test` does not "
                            "(tests/CMakeLists.txt: <dir>_<file>_matrix)")


REPO = pathlib.Path(__file__).resolve().parents[2]


def shardload_bin() -> str:
    """The command-line binary: $SHARDLOAD_BIN (set by ctest), else the first build directory that has one."""
    env = os.environ.get("SHARDLOAD_BIN")
    if env:
        return env
    for build in ("build-dev", "build", "build-asan"):
        path = REPO / build / "shardload"
        if path.exists():
            return str(path)
    raise RuntimeError("no shardload binary: set SHARDLOAD_BIN or build the repository")


def run_shardload(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([shardload_bin(), *map(str, args)], capture_output=True, text=True, check=check)


# Families make-tiny writes no FP8 checkpoint of (docs/families/llama4.md, gemma4.md say why): their FP8 cases skip.
NO_FP8_CHECKPOINTS = {"llama4", "gpt_oss", "gemma4"}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tiny(arch, quant="none", seed=7) -> path of a make-tiny checkpoint, made once per session."""
    made = {}
    root = tmp_path_factory.mktemp("models")

    def make(arch: str, quant: str = "none", seed: int = 7) -> str:
        if quant not in ("none", "mxfp4") and arch in NO_FP8_CHECKPOINTS:
            pytest.skip(f"make-tiny writes no FP8 checkpoint of {arch}")
        key = (arch, quant, seed)
        if key not in made:
            out = root / f"{arch}-{quant}-{seed}"
            run_shardload("make-tiny", "--arch", arch, "--quant", quant, "--seed", seed, "--out", out)
            made[key] = str(out)
        return made[key]

    return make


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file, read directly: the tests' reference, which
    shares no code with shardload."""
    data = pathlib.Path(path).read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    base = 8 + length
    return {name: (e["dtype"], e["shape"], data[base + e["data_offsets"][0]:base + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}


def engine_module(torch, entries, skip=(), shapes=None):
    """A torch module holding an engine layout's names (each dot a submodule), zero-filled: the shape of an
    engine's state, without the engine."""
    from shardload.engines import torch_dtype

    root = torch.nn.Module()
    for e in entries:
        if e["name"] in skip:
            continue
        *path, leaf = e["name"].split(".")
        parent = root
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        shape = (shapes or {}).get(e["name"], tuple(e["shape"]))
        parent.register_buffer(leaf, torch.zeros(shape, dtype=torch_dtype(e["dtype"])))
    return root
