"""LiveModel.update_weights with an expert filter ({"experts": [[layer, expert], ...]}): exactly the
slots of the selected experts take the new checkpoint's bytes, on every rank holding a replica, and only
their tensors are read; every other byte keeps the first checkpoint's, and a static FP8 rank's merged
input scale is the maximum of its per-expert input scales, kept and new. The reference is two fresh loads
and the checkpoint files read directly, not the update code."""
import pathlib

import pytest
import torch

import shardload
from conftest import read_safetensors

LAYOUT = dict(tp=2, ep=2, redundant_experts=2)  # 8 experts in 10 slots: rank 0 holds 0-4, rank 1 5-7, 0, 1


def raw(t):
    return torch.from_dlpack(t).contiguous().view(torch.uint8).reshape(-1)


def slot_rows(t):
    """The bytes of each expert slot (the first dimension) of a rank tensor."""
    x = torch.from_dlpack(t).contiguous()
    return list(x.reshape(x.shape[0], -1).view(torch.uint8))


@pytest.mark.parametrize("experts", [[[1, 3]], [[1, 1], [1, 3]]], ids=["expert3", "experts1and3"])
def test_an_expert_filter_rewrites_only_the_slots_of_its_experts(tiny, experts):
    a, b = tiny("qwen3_moe", "fp8", seed=1), tiny("qwen3_moe", "fp8", seed=2)
    live = shardload.LiveModel(a, **LAYOUT)
    fresh_a, fresh_b = shardload.load(a, **LAYOUT), shardload.load(b, **LAYOUT)
    w13 = torch.from_dlpack(live.tensors(0)["model.layers.1.mlp.experts.w13_weight"])
    address = w13.data_ptr()

    result = live.update_weights(b, filter={"experts": experts})
    assert result["version"] == live.version == 1
    assert w13.data_ptr() == address

    # Which MoE layer row places decoder layer 1's experts.
    moe_layers = sorted({int(n.split(".")[2]) for n in live.tensors(0) if ".mlp.experts.w13_weight" in n})
    row = live.expert_map[moe_layers.index(1)]
    slots = len(row) // 2
    selected = {expert for layer, expert in experts if layer == 1}
    rewritten = 0
    for rank in range(2):
        held = row[rank * slots:(rank + 1) * slots]
        new = [e in selected for e in held]
        now, old, fresh = (m.tensors(rank, internal=True) for m in (live, fresh_a, fresh_b))
        for name, t in now.items():
            if not name.startswith("model.layers.1.mlp.experts."):
                assert torch.equal(raw(t), raw(old[name])), f"rank {rank} {name} changed"
                continue
            if name.endswith("_input_scale"):
                continue  # the rank's maximum: below
            for j, (got, was, want) in enumerate(zip(slot_rows(t), slot_rows(old[name]), slot_rows(fresh[name]))):
                assert torch.equal(got, want if new[j] else was), f"rank {rank} {name} slot {j} (expert {held[j]})"
                rewritten += got.numel() if new[j] else 0
        for merged in (n for n in now if n.startswith("model.layers.1.mlp.experts.") and n.endswith("_input_scale")):
            peak = torch.from_dlpack(now[merged + "_parts"]).max()
            assert torch.equal(torch.from_dlpack(now[merged]), torch.full_like(torch.from_dlpack(now[merged]), peak))
    assert rewritten > 0

    # Only the selected experts' checkpoint tensors were read: each once.
    prefixes = tuple(f"model.layers.{layer}.mlp.experts.{expert}." for layer, expert in experts)
    selected_bytes = sum(len(data) for f in sorted(pathlib.Path(b).glob("*.safetensors"))
                         for name, (_, _, data) in read_safetensors(f).items() if name.startswith(prefixes))
    assert result["read_bytes"] == selected_bytes


def test_a_substring_naming_one_expert_still_reloads_its_whole_module(tiny):
    a, b = tiny("qwen3_moe", "fp8", seed=1), tiny("qwen3_moe", "fp8", seed=2)
    live = shardload.LiveModel(a, **LAYOUT)
    fresh_b = shardload.load(b, **LAYOUT)
    live.update_weights(b, filter=["layers.1.mlp.experts.3."])
    name = "model.layers.1.mlp.experts.w13_weight"
    assert torch.equal(raw(live.tensors(0)[name]), raw(fresh_b.tensors(0)[name]))
