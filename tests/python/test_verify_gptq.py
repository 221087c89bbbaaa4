"""`shardload.verify` on GPTQ int4 (make-tiny --quant gptq: 32-value groups, symmetric; gptq-channel: one group a
column) and AWQ int4 (awq: GEMM, zero points), whose words, scales and zero points are stored and kept
input-major (GPTQ's qweight [K / 8, N], AWQ's [K, N / 8]): dense, MoE with expert parallelism and MoE-TP, and MLA
pass; a swapped group scale, a scale cut for another rank, a wrong nibble order (GPTQ's, and AWQ's read in
order), fused parts' column blocks swapped, an expert scaled by another expert's scales and AWQ zero points of
another rank are each caught (issue 47, item 4); Qwen3.5's packed in_proj_qkv parts (issue 49)."""
import pytest
import torch

from shardload import rank_source
from shardload.verify import verify

from verify_helpers import check, export  # noqa: F401 (an autouse fixture)


@pytest.mark.parametrize("arch,args", [("llama", ["--tp", "2"]), ("qwen3_moe", ["--tp", "2", "--ep", "2"]),
                                       ("qwen3_moe", ["--tp", "2"]), ("deepseek_v3", ["--tp", "2", "--ep", "2"])])
@pytest.mark.parametrize("quant", ["gptq", "gptq-channel", "awq"])
def test_gptq_weights_pass(tiny, arch, args, quant):
    report, layout = check(tiny(arch, quant), args)
    assert layout["quantization"] == quant.split("-")[0]
    assert any("experts.w2" in c.module for c in report.checks) == (arch != "llama")


def _gptq_corrupted(model, tmp_path, args, edit):
    """The export's ranks with `edit(ranks)` applied to writable copies, verified."""
    ranks, layout = rank_source.load_export(export(model, tmp_path / "export", *args))
    ranks = [{n: t.clone() for n, t in rank.items()} for rank in ranks]
    edit(ranks)
    return verify(model, ranks, layout)


def _gptq_failed(report):
    return sorted({c.module for c in report.failures})


def test_a_swapped_gptq_group_scale_fails(tiny, tmp_path):
    def swap(ranks):  # two groups of output column 0 (their scales differ: make-tiny's amax)
        s = ranks[1]["model.layers.0.self_attn.o_proj.scales"]
        s[[0, 1], 0] = s[[1, 0], 0].clone()

    report = _gptq_corrupted(tiny("llama", "gptq"), tmp_path, ["--tp", "2"], swap)
    assert _gptq_failed(report) == ["layer 0 self_attn.o_proj"]


def test_a_gptq_scale_cut_for_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # row-parallel: rank 1 given rank 0's groups
        name = "model.layers.0.mlp.down_proj.scales"
        ranks[1][name] = ranks[0][name].clone()

    report = _gptq_corrupted(tiny("llama", "gptq"), tmp_path, ["--tp", "2"], other_rank)
    assert _gptq_failed(report) == ["layer 0 mlp.down_proj"]


def test_a_wrong_gptq_nibble_order_fails(tiny, tmp_path):
    def reverse_nibbles(ranks):  # input j of each word at bits 4 * (7 - j) instead of 4 * j
        name = "model.layers.0.mlp.gate_up_proj.qweight"
        w = ranks[0][name].to(torch.int64) & 0xFFFFFFFF
        out = torch.zeros_like(w)
        for j in range(8):
            out |= ((w >> (4 * j)) & 0xF) << (4 * (7 - j))
        ranks[0][name] = torch.where(out >= 2 ** 31, out - 2 ** 32, out).to(torch.int32)

    report = _gptq_corrupted(tiny("llama", "gptq"), tmp_path, ["--tp", "2"], reverse_nibbles)
    assert _gptq_failed(report) == ["layer 0 mlp.gate_up_proj"]


def test_swapped_gptq_part_columns_fail(tiny, tmp_path):
    def swap_k_v(ranks):  # qkv_proj [K / 8, q | k | v]: k's and v's column blocks (as wide) swapped
        for suffix in ("qweight", "scales", "qzeros"):
            t = ranks[0][f"model.layers.0.self_attn.qkv_proj.{suffix}"]
            q, kv = (64, 16) if suffix != "qzeros" else (8, 2)
            t[:, q:q + 2 * kv] = torch.cat([t[:, q + kv:q + 2 * kv], t[:, q:q + kv]], dim=1)

    report = _gptq_corrupted(tiny("llama", "gptq"), tmp_path, ["--tp", "2"], swap_k_v)
    assert _gptq_failed(report) == ["layer 0 self_attn.qkv_proj"]


def test_a_gptq_expert_scaled_by_another_expert_fails(tiny, tmp_path):
    def other_expert(ranks):  # slot 0's scales from slot 1
        s = ranks[0]["model.layers.1.mlp.experts.w13_scales"]
        s[0] = s[1].clone()

    report = _gptq_corrupted(tiny("qwen3_moe", "gptq"), tmp_path, ["--tp", "2", "--ep", "2"], other_expert)
    assert _gptq_failed(report) == ["layer 1 experts.w13"]


def test_awq_words_read_in_order_fail(tiny, tmp_path):
    def sequential(ranks):  # AWQ's nibble order [0, 2, 4, 6, 1, 3, 5, 7] undone in one word row
        name = "model.layers.0.mlp.gate_up_proj.qweight"
        w = ranks[0][name].to(torch.int64) & 0xFFFFFFFF
        order = (0, 2, 4, 6, 1, 3, 5, 7)
        out = torch.zeros_like(w)
        for j in range(8):
            out |= ((w >> (4 * j)) & 0xF) << (4 * order[j])
        ranks[0][name] = torch.where(out >= 2 ** 31, out - 2 ** 32, out).to(torch.int32)

    report = _gptq_corrupted(tiny("llama", "awq"), tmp_path, ["--tp", "2"], sequential)
    assert _gptq_failed(report) == ["layer 0 mlp.gate_up_proj"]


def test_awq_zero_points_of_another_rank_fail(tiny, tmp_path):
    def other_rank(ranks):  # column-parallel: rank 1's columns given rank 0's zero points
        name = "model.layers.0.self_attn.qkv_proj.qzeros"
        ranks[1][name] = ranks[0][name].clone()

    report = _gptq_corrupted(tiny("llama", "awq"), tmp_path, ["--tp", "2"], other_rank)
    assert _gptq_failed(report) == ["layer 0 self_attn.qkv_proj"]


# Qwen3.5 stores its linear attention's q, k and v as one packed in_proj_qkv: each part's rows are cut from
# the dequantized whole and checked against the rank's in_proj_qkvz column blocks (issue 49).
@pytest.mark.parametrize("arch,args", [("qwen3_5", ["--tp", "2"]), ("qwen3_5_moe", ["--tp", "2", "--ep", "2"])])
@pytest.mark.parametrize("quant", ["gptq", "ct-w4a16"])
def test_qwen3_5_packed_linear_attention_parts_pass(tiny, arch, args, quant):
    report, _ = check(tiny(arch, quant), args)
    assert any(c.module.endswith("linear_attn.in_proj_qkvz") for c in report.checks)


def test_qwen3_5_linear_attention_cut_for_another_rank_fails(tiny, tmp_path):
    def other_rank(ranks):  # rank 1 given rank 0's words and scales of in_proj_qkvz
        for suffix in ("qweight", "scales", "qzeros"):
            name = f"model.layers.0.linear_attn.in_proj_qkvz.{suffix}"
            ranks[1][name] = ranks[0][name].clone()

    report = _gptq_corrupted(tiny("qwen3_5", "gptq"), tmp_path, ["--tp", "2"], other_rank)
    assert _gptq_failed(report) == ["layer 0 linear_attn.in_proj_qkvz"]
