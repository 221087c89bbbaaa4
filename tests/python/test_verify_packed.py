"""`shardload.verify` on llm-compressor's integer weights (compressed-tensors pack-quantized: W4A16 in 32-value
groups, with zero points, W8A16 per channel; int-quantized: W8A8 int8 per channel; nvfp4-pack-quantized: FP4
in 16-value groups under global scales): dense, MoE with expert parallelism and MoE-TP, and MLA pass; a swapped
group, a mis-cut scale, a wrong nibble order, a zero point of another rank, a wrong weight_shape, an int8 row
scale of another rank, NVFP4 global scales of swapped parts or of another expert and swapped FP4 nibbles are
each caught (issue 47, item 4)."""
import pytest
import torch

from shardload import rank_source
from shardload.verify import VerifyError, verify

from verify_helpers import check, export  # noqa: F401 (an autouse fixture)


@pytest.mark.parametrize("arch,args", [("llama", ["--tp", "2"]), ("qwen3_moe", ["--tp", "2", "--ep", "2"]),
                                       ("qwen3_moe", ["--tp", "2"]), ("deepseek_v3", ["--tp", "2", "--ep", "2"]),
                                       # Kimi-K2.5: the routed experts alone packed, an int32 weight_shape.
                                       ("kimi_k25", ["--tp", "2", "--ep", "2"]), ("kimi_k25", ["--tp", "2"])])
@pytest.mark.parametrize("quant", ["ct-w4a16", "ct-w4a16-asym", "ct-w8a16", "ct-w8a8", "ct-nvfp4"])
def test_packed_integer_weights_pass(tiny, arch, args, quant):
    report, layout = check(tiny(arch, quant), args)
    assert layout["quantization"] == "compressed-tensors"
    assert layout["weight_strategy"] == ("channel" if quant in ("ct-w8a16", "ct-w8a8") else "group")
    assert any("experts.w2" in c.module for c in report.checks) == (arch != "llama")


def _corrupted(model, tmp_path, args, edit):
    """The export's ranks with `edit(ranks)` applied to writable copies, verified."""
    ranks, layout = rank_source.load_export(export(model, tmp_path / "export", *args))
    ranks = [{n: t.clone() for n, t in rank.items()} for rank in ranks]
    edit(ranks)
    return verify(model, ranks, layout)


def _failed(report):
    return sorted({c.module for c in report.failures})


def test_a_swapped_group_scale_fails(tiny, tmp_path):
    def swap(ranks):
        s = ranks[1]["model.layers.0.self_attn.o_proj.weight_scale"]
        s[0, [0, 1]] = s[0, [1, 0]].clone()  # two groups of row 0 (their scales differ: make-tiny's amax)

    report = _corrupted(tiny("llama", "ct-w4a16"), tmp_path, ["--tp", "2"], swap)
    assert _failed(report) == ["layer 0 self_attn.o_proj"]


def test_a_scale_cut_for_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # row-parallel: rank 1 given rank 0's groups' scales
        name = "model.layers.0.mlp.down_proj.weight_scale"
        ranks[1][name] = ranks[0][name].clone()

    report = _corrupted(tiny("llama", "ct-w4a16"), tmp_path, ["--tp", "2"], other_rank)
    assert _failed(report) == ["layer 0 mlp.down_proj"]


def test_a_wrong_nibble_order_fails(tiny, tmp_path):
    def reverse_nibbles(ranks):  # value j of each word at bits 4 * (7 - j) instead of 4 * j
        name = "model.layers.0.mlp.gate_up_proj.weight_packed"
        w = ranks[0][name].to(torch.int64) & 0xFFFFFFFF
        out = torch.zeros_like(w)
        for j in range(8):
            out |= ((w >> (4 * j)) & 0xF) << (4 * (7 - j))
        ranks[0][name] = torch.where(out >= 2 ** 31, out - 2 ** 32, out).to(torch.int32)

    report = _corrupted(tiny("llama", "ct-w4a16"), tmp_path, ["--tp", "2"], reverse_nibbles)
    assert _failed(report) == ["layer 0 mlp.gate_up_proj"]


def test_a_zero_point_of_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # column-parallel: rank 1's rows given rank 0's zero points
        name = "model.layers.0.self_attn.qkv_proj.weight_zero_point"
        ranks[1][name] = ranks[0][name].clone()

    report = _corrupted(tiny("llama", "ct-w4a16-asym"), tmp_path, ["--tp", "2"], other_rank)
    assert _failed(report) == ["layer 0 self_attn.qkv_proj"]


def test_an_expert_scale_of_another_expert_fails(tiny, tmp_path):
    def other_expert(ranks):
        name = "model.layers.1.mlp.experts.w2_weight_scale"
        ranks[0][name][0] = ranks[0][name][1].clone()

    report = _corrupted(tiny("qwen3_moe", "ct-w4a16"), tmp_path, ["--tp", "2", "--ep", "2"], other_expert)
    assert [m.rsplit(" ", 1)[-1] for m in _failed(report)] == ["experts.w2"]


def test_a_weight_shape_no_part_has_is_refused(tiny, tmp_path):
    def wrong(ranks):
        ranks[0]["model.layers.0.self_attn.o_proj.weight_shape"][0] += 1

    with pytest.raises(VerifyError, match="weight_shape"):
        _corrupted(tiny("llama", "ct-w4a16"), tmp_path, ["--tp", "2"], wrong)


def test_an_int8_row_scale_of_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # column-parallel: rank 1's rows given rank 0's row scales (the int8 codes kept)
        name = "model.layers.0.mlp.gate_up_proj.weight_scale"
        ranks[1][name] = ranks[0][name].clone()

    report = _corrupted(tiny("llama", "ct-w8a8"), tmp_path, ["--tp", "2"], other_rank)
    assert _failed(report) == ["layer 0 mlp.gate_up_proj"]


def test_int8_experts_scaled_by_another_expert_fail(tiny, tmp_path):
    def other_expert(ranks):
        name = "model.layers.1.mlp.experts.w13_weight_scale"
        ranks[0][name][0] = ranks[0][name][1].clone()

    report = _corrupted(tiny("qwen3_moe", "ct-w8a8"), tmp_path, ["--tp", "2", "--ep", "2"], other_expert)
    assert [m.rsplit(" ", 1)[-1] for m in _failed(report)] == ["experts.w13"]


def test_nvfp4_global_scales_of_swapped_parts_fail(tiny, tmp_path):
    def swap(ranks):  # q's and k's global scales exchanged (make-tiny gives each projection its own)
        g = ranks[0]["model.layers.0.self_attn.qkv_proj.weight_global_scale"]
        g[[0, 1]] = g[[1, 0]].clone()

    report = _corrupted(tiny("llama", "ct-nvfp4"), tmp_path, ["--tp", "2"], swap)
    assert _failed(report) == ["layer 0 self_attn.qkv_proj"]


def test_nvfp4_global_scale_of_another_expert_fails(tiny, tmp_path):
    def other_expert(ranks):
        name = "model.layers.1.mlp.experts.w2_weight_global_scale"
        ranks[1][name][0] = ranks[1][name][1].clone()

    report = _corrupted(tiny("qwen3_moe", "ct-nvfp4"), tmp_path, ["--tp", "2", "--ep", "2"], other_expert)
    assert [m.rsplit(" ", 1)[-1] for m in _failed(report)] == ["experts.w2"]


def test_nvfp4_swapped_nibbles_fail(tiny, tmp_path):
    def swap_nibbles(ranks):  # value 2j in the high nibble instead of the low one
        name = "model.layers.0.mlp.down_proj.weight_packed"
        b = ranks[1][name].to(torch.int64)
        ranks[1][name] = (((b & 0x0F) << 4) | (b >> 4)).to(torch.uint8)

    report = _corrupted(tiny("llama", "ct-nvfp4"), tmp_path, ["--tp", "2"], swap_nibbles)
    assert _failed(report) == ["layer 0 mlp.down_proj"]


# NVIDIA ModelOpt's NVFP4 (make-tiny --quant modelopt-nvfp4): the same bytes under `weight`, each projection's
# weight_scale_2 (amax / 2688, the reciprocal of compressed-tensors' global scale) kept per part on a rank.
@pytest.mark.parametrize("arch,args", [("llama", ["--tp", "2"]), ("qwen3_moe", ["--tp", "2", "--ep", "2"]),
                                       ("qwen3_moe", ["--tp", "2"]), ("deepseek_v3", ["--tp", "2", "--ep", "2"])])
def test_modelopt_nvfp4_passes(tiny, arch, args):
    report, layout = check(tiny(arch, "modelopt-nvfp4"), args)
    assert layout["quantization"] == "modelopt"
    assert any("experts.w2" in c.module for c in report.checks) == (arch != "llama")


def test_modelopt_nvfp4_from_hf_quant_config_json_passes(tiny, tmp_path):
    """The same checkpoint with its config in hf_quant_config.json (older ModelOpt exports) verifies alike."""
    import json
    import shutil

    model = tmp_path / "hf-file"
    shutil.copytree(tiny("llama", "modelopt-nvfp4"), model)
    config = json.loads((model / "config.json").read_text())
    q = config.pop("quantization_config")
    (model / "config.json").write_text(json.dumps(config))
    (model / "hf_quant_config.json").write_text(json.dumps(
        {"producer": q["producer"], "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                                                     "group_size": 16, "exclude_modules": q["ignore"]}}))
    report, layout = check(str(model), ["--tp", "2"])
    assert layout["quantization"] == "modelopt"


def test_modelopt_nvfp4_scale_2_of_swapped_parts_fail(tiny, tmp_path):
    def swap(ranks):  # q's and k's weight_scale_2 exchanged (make-tiny gives each projection its own)
        g = ranks[0]["model.layers.0.self_attn.qkv_proj.weight_scale_2"]
        g[[0, 1]] = g[[1, 0]].clone()

    report = _corrupted(tiny("llama", "modelopt-nvfp4"), tmp_path, ["--tp", "2"], swap)
    assert _failed(report) == ["layer 0 self_attn.qkv_proj"]


def test_modelopt_nvfp4_scale_2_of_another_expert_fails(tiny, tmp_path):
    def other_expert(ranks):
        name = "model.layers.1.mlp.experts.w13_weight_scale_2"
        ranks[1][name][0] = ranks[1][name][1].clone()

    report = _corrupted(tiny("qwen3_moe", "modelopt-nvfp4"), tmp_path, ["--tp", "2", "--ep", "2"], other_expert)
    assert [m.rsplit(" ", 1)[-1] for m in _failed(report)] == ["experts.w13"]


def test_modelopt_nvfp4_group_scale_cut_for_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # row-parallel: rank 1 given rank 0's group scales
        name = "model.layers.0.mlp.down_proj.weight_scale"
        ranks[1][name] = ranks[0][name].clone()

    report = _corrupted(tiny("llama", "modelopt-nvfp4"), tmp_path, ["--tp", "2"], other_rank)
    assert _failed(report) == ["layer 0 mlp.down_proj"]


def test_modelopt_nvfp4_swapped_nibbles_fail(tiny, tmp_path):
    def swap_nibbles(ranks):  # value 2j in the high nibble instead of the low one
        name = "model.layers.0.self_attn.o_proj.weight"
        b = ranks[1][name].to(torch.int64)
        ranks[1][name] = (((b & 0x0F) << 4) | (b >> 4)).to(torch.uint8)

    report = _corrupted(tiny("llama", "modelopt-nvfp4"), tmp_path, ["--tp", "2"], swap_nibbles)
    assert _failed(report) == ["layer 0 self_attn.o_proj"]
