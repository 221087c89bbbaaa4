"""What the verify tests share: the families, their test layouts, and a check of one model's ranks loaded
by the extension (test_verify.py and test_verify_families.py: two files, so that ctest runs them side by
side)."""
import pytest

from conftest import run_shardload, shardload_bin
from shardload import rank_source
from shardload.verify import verify

DENSE = ["llama", "qwen2", "qwen3", "qwen3_5"]
MOE = ["qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "deepseek_v32", "ernie4_5_moe",
       "glm4_moe", "minimax_m2", "qwen3_next", "llama4", "gpt_oss", "glm4_moe_lite", "glm_moe_dsa",
       "qwen3_5_moe", "gemma4", "kimi_k25"]


@pytest.fixture(autouse=True)
def binary_for_export(monkeypatch):
    """rank_source runs `shardload export` from $SHARDLOAD_BIN: the binary the other fixtures use."""
    monkeypatch.setenv("SHARDLOAD_BIN", shardload_bin())


def layout_args(arch, extra=()):
    return ["--tp", "2"] + ([] if arch in DENSE else ["--ep", "2"]) + list(extra)


def export(model, out, *args):
    run_shardload("export", model, "--out", out, *args)
    return str(out)


def check(model, args):
    """Verifies MODEL's ranks under the layout `args` (command-line flags), loaded by the extension."""
    kwargs = {}
    flags = list(args)
    while flags:
        flag = flags.pop(0).lstrip("-").replace("-", "_")
        kwargs[flag] = int(flags.pop(0)) if flag in ("tp", "ep", "dp") else flags.pop(0)
    ranks, layout = rank_source.load_with_library(model, kwargs)
    report = verify(model, ranks, layout)
    assert report.ok, "\n".join(report.lines())
    return report, layout
