"""FP8 and integer checkpoints as llm-compressor writes them (compressed-tensors): `oneshot` with FP8_DYNAMIC,
FP8_BLOCK and static FP8, W4A16, W4A16_ASYM and W8A16 (pack-quantized), W8A8 (int8, int-quantized) and NVFP4
(nvfp4-pack-quantized) on tiny random models of a dense, a
MoE and an MLA family. Each loads, exports, verifies, and a live model updates in place from a second such
checkpoint (and rebalances its experts)."""
import json

import pytest
import shardload
import torch
from shardload.verify import main as verify

from producers import cli, layout, layout_kwargs, needs_producers, producer

pytestmark = needs_producers

FAMILIES = ["llama", "qwen3_moe", "deepseek_v3"]
SCHEMES = {"FP8_DYNAMIC": ("channel", True), "FP8_BLOCK": ("block", True), "FP8": ("tensor", False)}
# Integer weights (no input quantization): bits, symmetric. llm-compressor 0.14's W8A16 is int8 in groups of
# 128 too; make-tiny's block-aligned geometry keeps every 128-group whole at tp 2.
PACKED = {"W4A16": (4, True), "W4A16_ASYM": (4, False), "W8A16": (8, True)}
# int8 weights per channel as they are, activations int8 per token at run time: format, strategies. NVFP4:
# FP4 weights and activations in 16-value groups under global scales.
INT8 = {"W8A8": ("int-quantized", "channel", "token"), "NVFP4": ("nvfp4-pack-quantized", "tensor_group", "tensor_group")}


# `make test` quantizes every scheme once and every family with two or three of them (a dense, a MoE and an MLA
# family; FP8 static, dynamic and block; int4 symmetric and with zero points; int8; W8A8; NVFP4); the other
# pairs are the matrix's (`make test-matrix`: producers_test_llm_compressor_matrix).
GATE = {("llama", "FP8"), ("llama", "W4A16"), ("llama", "W8A8"), ("qwen3_moe", "FP8_BLOCK"), ("qwen3_moe", "NVFP4"),
        ("qwen3_moe", "W8A16"), ("deepseek_v3", "FP8_DYNAMIC"), ("deepseek_v3", "W4A16_ASYM")}
CASES = [pytest.param(arch, scheme, marks=() if (arch, scheme) in GATE else pytest.mark.matrix)
         for scheme in [*SCHEMES, *PACKED, *INT8] for arch in FAMILIES]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, request):
    """{(arch, scheme, seed): checkpoint}: two random models per family (seeds 1 and 2), quantized by
    llm-compressor with each scheme the selected tests name (every pair under `make test-matrix`). The geometry
    is make-tiny's block-aligned one, so that 128x128 blocks split at tp 2."""
    root = tmp_path_factory.mktemp("llm-compressor")
    pairs = sorted({(item.callspec.params["arch"], item.callspec.params["scheme"]) for item in request.session.items
                    if hasattr(item, "callspec") and "scheme" in item.callspec.params})
    for arch in sorted({arch for arch, _ in pairs}):
        cli("make-tiny", "--arch", arch, "--quant", "ct-fp8-block", "--out", root / f"config-{arch}")
    models, args = {}, []
    for arch, scheme in pairs:
        for seed in (1, 2):
            models[(arch, scheme, seed)] = root / f"{arch}-{scheme}-{seed}"
            args += [scheme, seed, root / f"config-{arch}", models[(arch, scheme, seed)]]
    producer("quantize.py", *args)
    return models


def rank_bytes(tensors):
    return {name: torch.from_dlpack(t).view(torch.uint8).clone() for name, t in tensors.items()}


@pytest.mark.parametrize("arch, scheme", CASES)
def test_llm_compressor_fp8_loads_exports_updates_and_verifies(quantized, official_safetensors, tmp_path, arch, scheme):
    a, b = quantized[(arch, scheme, 1)], quantized[(arch, scheme, 2)]
    quant = json.loads((a / "config.json").read_text())["quantization_config"]
    weights = quant["config_groups"]["group_0"]["weights"]
    assert quant["quant_method"] == "compressed-tensors"
    if scheme in PACKED:
        assert quant["format"] == "pack-quantized"
        assert (weights["num_bits"], weights["symmetric"], weights["strategy"]) == (*PACKED[scheme], "group")
    elif scheme in INT8:
        inputs = quant["config_groups"]["group_0"]["input_activations"]
        assert (quant["format"], weights["strategy"], inputs["strategy"]) == INT8[scheme]
    else:
        assert quant["format"] == "float-quantized"
        assert (weights["strategy"],
                quant["config_groups"]["group_0"]["input_activations"]["dynamic"]) == SCHEMES[scheme]

    flags = layout(arch, 2)
    out = tmp_path / "export"
    cli("export", a, *flags, "--out", out)
    assert verify([str(a), "--export", str(out)]) == 0
    official_safetensors.extend([a, out])

    kwargs = layout_kwargs(arch, 2)
    live = shardload.LiveModel(a, **kwargs)
    views = {rank: live.tensors(rank) for rank in (0, 1)}
    addresses = {(rank, name): t.data_ptr for rank in views for name, t in views[rank].items()}
    result = live.update_weights(b)
    assert result["version"] == 1 and result["updated_tensors"] > 0
    fresh = shardload.load(b, **kwargs)
    for rank in (0, 1):
        expected = rank_bytes(fresh.tensors(rank))
        got = rank_bytes(live.tensors(rank))
        assert expected.keys() == got.keys()
        for name in expected:
            assert torch.equal(got[name], expected[name]), f"rank {rank} {name} after the update"
            assert live.tensors(rank)[name].data_ptr == addresses[(rank, name)], f"{name} moved"
    if arch != "llama":
        rows = [list(reversed(row)) for row in live.expert_map]
        assert live.rebalance(rows)["read_bytes"] == 0
        moved = shardload.load(b, expert_map=rows, **kwargs)
        for rank in (0, 1):
            expected, got = rank_bytes(moved.tensors(rank)), rank_bytes(live.tensors(rank))
            assert all(torch.equal(got[n], expected[n]) for n in expected), f"rank {rank} after the rebalance"
