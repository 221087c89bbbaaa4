"""What the producers' tests share: the shardload binary, the producers' PyPI interpreter, layouts.

The tests run in Debian's python with the shardload package; the producers (transformers, llm-compressor,
the official safetensors) run in their own PyPI environment, SHARDLOAD_PRODUCERS_PYTHON, made by
scripts/pypi-env.sh from requirements.lock (`make test` makes it). Without it the tests report themselves
skipped."""
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PRODUCERS = os.environ.get("SHARDLOAD_PRODUCERS_PYTHON", "")
BIN = os.environ.get("SHARDLOAD_BIN", "")
DENSE = ["llama", "qwen2", "qwen3", "qwen3_5"]
MOE = ["qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "deepseek_v32", "ernie4_5_moe",
       "glm4_moe", "minimax_m2", "qwen3_next", "llama4", "gpt_oss", "glm4_moe_lite", "glm_moe_dsa",
       "qwen3_5_moe", "gemma4"]
# make-tiny writes none (docs/families/llama4.md, gpt_oss.md, gemma4.md)
NO_FP8_CHECKPOINTS = {"llama4", "gpt_oss", "gemma4"}

needs_producers = pytest.mark.skipif(not PRODUCERS or not os.access(PRODUCERS, os.X_OK),
                                     reason="no producers' environment (scripts/pypi-env.sh could not make it)")


def cli(*args, stderr=False):
    """Runs the shardload command line; returns its standard output (with stderr=True, its standard error
    then its standard output)."""
    result = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stderr + result.stdout if stderr else result.stdout


def producer(script, *args, python=None):
    """Runs SCRIPT (a file of this folder) in the producers' interpreter (or PYTHON, another environment's),
    without the sanitizer runtime or the shardload package the suite may put in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH", "ASAN_OPTIONS")}
    result = subprocess.run([python or PRODUCERS, str(HERE / script), *map(str, args)], capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def layout_kwargs(arch, tp=2):
    """The layout at TP size tp, as the Python API's keywords: MoE families take expert parallelism 2 from
    tp 2 on."""
    return {"tp": tp} if arch in DENSE or tp == 1 else {"tp": tp, "ep": 2}


def layout(arch, tp=2):
    """The same layout as command-line flags."""
    return [arg for key, value in layout_kwargs(arch, tp).items() for arg in (f"--{key}", str(value))]


def open_with_official_safetensors(*dirs):
    """Every .safetensors file under dirs, opened and read whole by the official package; returns the count
    (asserted equal to the number of files, so that no file is passed over)."""
    count = int(producer("open_with_safetensors.py", *dirs).strip())
    assert count == sum(len(list(pathlib.Path(d).rglob("*.safetensors"))) for d in dirs)
    return count
