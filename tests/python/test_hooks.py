"""Engine hooks: iter_weights gives every checkpoint tensor as the engines' load_weights consume it, and
load_state_dict_into copies a rank's tensors into a torch module in place, naming every mismatch."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import shardload
from conftest import read_safetensors


def test_iter_weights_gives_every_checkpoint_tensor_unsharded(tiny):
    model = pathlib.Path(tiny("deepseek_v3", "fp8-block"))
    index = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    expected = {}
    for file in sorted(set(index.values())):
        expected.update(read_safetensors(model / file))
    seen = {}
    for name, tensor in shardload.iter_weights(model, threads=2):
        dtype, shape, raw = expected[name]
        assert list(tensor.shape) == shape, name
        view = tensor.reshape(-1).view(torch.uint8) if tensor.element_size() > 1 else tensor.reshape(-1)
        assert view.numpy().tobytes() == raw, name
        seen[name] = tensor
    assert seen.keys() == expected.keys()
    assert getattr(seen["model.layers.0.self_attn.o_proj.weight"], "shardload_dtype", None) == "F8_E4M3"


def module_with(tensors):
    """A torch module whose parameters have the tensors' dotted names, shapes and dtypes (zeros)."""
    root = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        node = root
        for part in path:
            if not hasattr(node, part):
                node.add_module(part, torch.nn.Module())
            node = getattr(node, part)
        node.register_parameter(leaf, torch.nn.Parameter(torch.zeros(t.shape, dtype=t.dtype), requires_grad=False))
    return root


def test_load_state_dict_into_copies_in_place(tiny):
    loaded = shardload.load(tiny("qwen3_moe"), tp=2, ep=2)
    rank = {name: torch.from_dlpack(t) for name, t in loaded.tensors(1).items()}
    module = module_with(rank)
    addresses = {name: p.data_ptr() for name, p in module.named_parameters()}
    copied = shardload.load_state_dict_into(module, loaded.tensors(1))
    assert sorted(copied) == sorted(rank)
    for name, p in module.named_parameters():
        assert p.data_ptr() == addresses[name], f"{name} was replaced, not copied into"
        assert torch.equal(p.data.view(torch.uint8) if p.dtype != torch.uint8 else p.data,
                           rank[name].view(torch.uint8) if p.dtype != torch.uint8 else rank[name]), name


def test_load_state_dict_into_names_every_mismatch_and_copies_nothing(tiny):
    loaded = shardload.load(tiny("qwen3_moe"), tp=2, ep=2)
    rank = {name: torch.from_dlpack(t) for name, t in loaded.tensors(0).items()}
    module = module_with(rank)
    module.model.norm.weight = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16), requires_grad=False)
    module.lm_head.weight = torch.nn.Parameter(torch.zeros(rank["lm_head.weight"].shape), requires_grad=False)
    module.add_module("extra", torch.nn.Linear(2, 2))
    with pytest.raises(shardload.InvalidArgumentError) as error:
        shardload.load_state_dict_into(module, rank)
    message = str(error.value)
    for expected in ("model.norm.weight: shape", "lm_head.weight: dtype", "extra.weight: not in the rank tensors",
                     "extra.bias: not in the rank tensors"):
        assert expected in message
    assert not any(p.abs().sum() for n, p in module.named_parameters() if n.startswith("model.layers.0"))
    # Not strict: the extra module is left alone, mismatched shapes still refused.
    with pytest.raises(shardload.InvalidArgumentError, match="model.norm.weight: shape"):
        shardload.load_state_dict_into(module, rank, strict=False)


def bytes_of(t):
    flat = t.detach().reshape(-1)
    return (flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)).numpy().tobytes()


@pytest.mark.parametrize("arch,quant,layout", [("qwen3_moe", "fp8", {"tp": 2, "ep": 2}),
                                               ("deepseek_v3", "fp8-block", {"tp": 2}),
                                               ("qwen3", "none", {"tp": 4})])
def test_load_into_fills_the_modules_tensors_in_place_through_small_windows(tiny, arch, quant, layout):
    model = tiny(arch, quant)
    loaded = shardload.load(model, ranks=[1], **layout)
    rank = {name: shardload.to_torch(t) for name, t in loaded.tensors(1).items()}
    module = module_with(rank)
    addresses = {name: p.data_ptr() for name, p in module.named_parameters()}
    stats = shardload.load_into(module, model, rank=1, threads=2, window_bytes=4096, **layout)
    for name, p in module.named_parameters():
        assert p.data_ptr() == addresses[name], f"{name} was replaced, not filled"
        assert bytes_of(p) == bytes_of(rank[name]), name
    assert stats["bytes_copied"] == sum(t.numel() * t.element_size() for t in rank.values())
    assert stats["windows"] > 1
    # The host memory the load held: its staging windows, not the rank.
    assert stats["staging_bytes"] < loaded.plan()["ranks"][1]["bytes"]


def test_load_into_names_every_mismatch_and_writes_nothing(tiny):
    model = tiny("qwen3_moe")
    rank = {name: shardload.to_torch(t) for name, t in shardload.load(model, ranks=[0], tp=2).tensors(0).items()}
    module = module_with(rank)
    module.model.norm.weight = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16), requires_grad=False)
    module.lm_head.weight = torch.nn.Parameter(torch.zeros(rank["lm_head.weight"].shape), requires_grad=False)
    module.add_module("extra", torch.nn.Linear(2, 2))
    with pytest.raises(shardload.InvalidArgumentError) as error:
        shardload.load_into(module, model, rank=0, tp=2)
    for expected in ("model.norm.weight: shape", "lm_head.weight: dtype", "extra.weight: not in the rank"):
        assert expected in str(error.value)
    assert not any(p.abs().sum() for n, p in module.named_parameters() if n.startswith("model.layers."))
    # Not strict: the extra module keeps its bytes, the others are filled.
    module.model.norm.weight = torch.nn.Parameter(torch.zeros(rank["model.norm.weight"].shape,
                                                              dtype=torch.bfloat16), requires_grad=False)
    module.lm_head.weight = torch.nn.Parameter(torch.zeros(rank["lm_head.weight"].shape, dtype=torch.bfloat16),
                                               requires_grad=False)
    extra = bytes_of(module.extra.weight)
    shardload.load_into(module, model, rank=0, strict=False, tp=2)
    assert bytes_of(module.extra.weight) == extra
    assert bytes_of(module.lm_head.weight) == bytes_of(rank["lm_head.weight"])
    with pytest.raises(shardload.InvalidArgumentError, match="no such rank"):
        shardload.load_into(module, model, rank=2, strict=False, tp=2)


REFILL_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[3])  # this folder: conftest's engine_module
from conftest import engine_module
from shardload import engines
first, second = sys.argv[1], sys.argv[2]
layout = {"tp": 2, "ep": 2}
named = engine_module(torch, engines.engine_layout(first, rank=1, engine="vllm", **layout))
# Small windows: the rank goes in many, so that a fill straight into the tensors would have written some
# before the failure.
first_fill = engines.fill_rank(named, first, 1, layout, "vllm", window_bytes=4096)
before = {n: t.clone() for n, t in named.state_dict().items()}
try:
    engines.fill_rank(named, second, 1, layout, "vllm", window_bytes=4096)
    outcome = "filled"
except Exception as e:
    outcome = type(e).__name__
same = all(torch.equal(t, before[n]) for n, t in named.state_dict().items())
print(json.dumps({"outcome": outcome, "unchanged": same, "first_bytes": first_fill["bytes"]}))
"""


def test_a_refill_whose_read_fails_midway_leaves_the_engines_tensors_as_they_were(tiny, tmp_path):
    """The plugins' refill of a live model from a checkpoint (shardload.engines.fill_rank a second time)
    reads the whole rank before copying: a read error injected halfway through it (SHARDLOAD_FAULT, the
    test builds' hook) is an IoError and every tensor keeps the first fill's bytes."""
    first, second = tiny("qwen3_moe", seed=51), tiny("qwen3_moe", seed=52)
    plan = shardload.plan(first, tp=2, ep=2)
    read_bytes = plan["ranks"][1]["read_bytes"]
    script = tmp_path / "refill.py"
    script.write_text(REFILL_SCRIPT)
    # The first fill reads the rank's bytes once; the refill fails halfway through its own.
    env = {**os.environ, "SHARDLOAD_FAULT": f"read_error_after:{read_bytes + read_bytes // 2}"}
    result = subprocess.run([sys.executable, str(script), first, second, str(pathlib.Path(__file__).parent)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "IoError", report
    assert report["unchanged"], report
