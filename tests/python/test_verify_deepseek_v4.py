"""`shardload.verify` on DeepSeek-V4 (issue 49): DeepSeek's own checkpoint names against vLLM's rank names,
ue8m0 (F8_E8M0) block grids and MXFP4 experts decoded on both sides, at expert parallelism and at MoE-TP; and
what it must catch: a changed ue8m0 exponent, MXFP4 experts with another slot's scales or their nibbles
swapped, attention sinks of another rank, a changed hash-routing entry."""
import pytest
import torch

from shardload import rank_source
from shardload.verify import verify
from verify_helpers import binary_for_export  # noqa: F401 (an autouse fixture)

# Modules every DeepSeek-V4 verification must have checked (the tiny model: layer 0 hash-routed and
# compressed at 128, layer 1 at 4 with the indexer).
EXPECTED = {"attn.fused_wqa_wkv", "attn.wq_b", "attn.wo_a", "attn.wo_b", "attn.attn_sink", "attn.q_norm",
            "attn.kv_norm", "hc_attn_fn", "hc_ffn_scale", "attn.compressor.ape", "attn.compressor.fused_wkv_wgate",
            "attn.indexer.wq_b", "attn.indexer.weights_proj", "attn.indexer.compressor.fused_wkv_wgate",
            "ffn.gate", "ffn.gate.tid2eid", "ffn.gate.e_score_correction_bias", "ffn.shared_experts.gate_up_proj",
            "ffn.shared_experts.down_proj", "experts.w13", "experts.w2", "model.embed_tokens.weight",
            "lm_head.weight", "model.hc_head_fn", "model.norm.weight"}


def load(model, tp, ep):
    return rank_source.load_with_library(model, {"tp": tp, "ep": ep})


# Experts split by EP, and by MoE-TP (4 in bf16; FP8's 128-row blocks leave the shared expert's 256 rows
# no tp 4 cut, which the planner refuses).
@pytest.mark.parametrize("quant,tp,ep", [("none", 2, 2), ("none", 4, 1), ("mxfp4", 2, 2), ("mxfp4", 2, 1)])
def test_deepseek_v4_passes(tiny, quant, tp, ep):
    model = tiny("deepseek_v4", quant)
    ranks, layout = load(model, tp, ep)
    if quant == "mxfp4":  # ue8m0 grids and MXFP4 experts kept as bytes
        assert ranks[0]["model.layers.0.attn.wq_b.weight_scale_inv"].shardload_dtype == "F8_E8M0"
        assert ranks[0]["model.layers.0.ffn.experts.w13_weight"].dtype == torch.uint8
    report = verify(model, ranks, layout)
    assert report.ok, "\n".join(report.lines())
    assert report.layers == [0, 1]
    modules = {c.module.split(" ", 2)[-1] if c.module.startswith("layer") else c.module for c in report.checks}
    assert EXPECTED <= modules, EXPECTED - modules


def failures(model, ranks, layout):
    return sorted(c.module for c in verify(model, ranks, layout).failures)


def test_deepseek_v4_corruptions_fail_naming_the_module(tiny):
    model = tiny("deepseek_v4", "mxfp4")
    x = "model.layers.1."

    def fresh():
        ranks, layout = load(model, 2, 2)
        return [{n: t.clone() for n, t in rank.items()} for rank in ranks], layout

    ranks, layout = fresh()  # one ue8m0 exponent one higher: that block's weights doubled
    ranks[1][x + "attn.wq_b.weight_scale_inv"][0, 0] += 1
    assert failures(model, ranks, layout) == ["layer 1 attn.wq_b"]

    ranks, layout = fresh()  # MXFP4 experts with the other slot's group scales
    s = ranks[0][x + "ffn.experts.w13_weight_scale"]
    s[[0, 1]] = s[[1, 0]].clone()
    assert failures(model, ranks, layout) == ["layer 1 experts.w13"]

    ranks, layout = fresh()  # the two E2M1 values of every w2 byte in the wrong order
    w = ranks[1][x + "ffn.experts.w2_weight"]
    w.copy_(((w & 0x0F) << 4) | (w >> 4))
    assert failures(model, ranks, layout) == ["layer 1 experts.w2"]

    ranks, layout = fresh()  # each rank holding the other's attention sinks
    ranks[0][x + "attn.attn_sink"], ranks[1][x + "attn.attn_sink"] = \
        ranks[1][x + "attn.attn_sink"], ranks[0][x + "attn.attn_sink"]
    assert failures(model, ranks, layout) == ["layer 1 attn.attn_sink"]

    ranks, layout = fresh()  # a token routed to another expert in the hash-routed layer
    t = ranks[0]["model.layers.0.ffn.gate.tid2eid"]
    t[3, 0] = (t[3, 0] + 1) % 8
    assert failures(model, ranks, layout) == ["layer 0 ffn.gate.tid2eid"]
