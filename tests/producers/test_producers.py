"""The real producers against shardload (issue: checkpoints as the producers write them). Runs in Debian's
python; the producers run in their own PyPI environment, SHARDLOAD_PRODUCERS_PYTHON (made by
scripts/pypi-env.sh from tests/producers/requirements.lock; `make test` makes it). Without it, skipped."""
import filecmp
import json
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PRODUCERS = os.environ.get("SHARDLOAD_PRODUCERS_PYTHON", "")
BIN = os.environ.get("SHARDLOAD_BIN", "")
DENSE = ["llama", "qwen2", "qwen3"]
MOE = ["qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "ernie4_5_moe", "glm4_moe"]

pytestmark = pytest.mark.skipif(not PRODUCERS or not os.access(PRODUCERS, os.X_OK),
                                reason="no producers' environment (scripts/pypi-env.sh could not make it)")


def shardload(*args):
    result = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def producer(script, *args):
    # The producers' interpreter, without the sanitizer runtime the suite may preload.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    result = subprocess.run([PRODUCERS, str(HERE / script), *map(str, args)], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def layout(arch):
    return ["--tp", "2"] + ([] if arch in DENSE else ["--ep", "2"])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{arch: (make-tiny dir, the same weights loaded and saved again by transformers' save_pretrained)}."""
    root = tmp_path_factory.mktemp("producers")
    pairs = {}
    for arch in DENSE + MOE:
        tiny = root / f"tiny-{arch}"
        shardload("make-tiny", "--arch", arch, "--out", tiny)
        pairs[arch] = (tiny, root / f"saved-{arch}")
    producer("save_pretrained.py", *[p for pair in pairs.values() for p in pair])
    return pairs


@pytest.mark.parametrize("arch", DENSE + MOE)
def test_transformers_save_pretrained_exports_byte_identical(saved, tmp_path, arch):
    tiny, resaved = saved[arch]
    config = json.loads((resaved / "config.json").read_text())
    assert "dtype" in config, "transformers 5 writes dtype (torch_dtype before)"
    assert len(list(resaved.glob("*.safetensors"))) > 1, "sharded, with an index"
    exports = []
    for model in (tiny, resaved):
        out = tmp_path / f"export-{model.name}"
        shardload("export", model, *layout(arch), "--out", out)
        exports.append(out)
    files = sorted(p.name for p in exports[0].glob("*.safetensors"))
    assert files and files == sorted(p.name for p in exports[1].glob("*.safetensors"))
    match, mismatch, errors = filecmp.cmpfiles(exports[0], exports[1], files, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


def test_the_official_safetensors_opens_every_file_shardload_writes(tmp_path):
    dirs = []
    for arch, quant in [("qwen3_moe", "none"), ("qwen3_moe", "fp8"), ("deepseek_v3", "fp8-block"),
                        ("llama", "ct-fp8-tensor"), ("qwen3_moe", "ct-fp8-channel"), ("deepseek_v3", "ct-fp8-block"),
                        ("mixtral", "none"), ("glm4_moe", "none")]:
        model = tmp_path / f"{arch}-{quant}"
        shardload("make-tiny", "--arch", arch, "--quant", quant, "--out", model)
        out = tmp_path / f"export-{arch}-{quant}"
        shardload("export", model, *layout(arch), "--out", out)
        dirs += [model, out]
    count = int(producer("open_with_safetensors.py", *dirs).strip())
    assert count == sum(len(list(d.glob("*.safetensors"))) for d in dirs) and count > 16
