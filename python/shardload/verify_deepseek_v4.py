"""DeepSeek-V4 for `shardload.verify`: its checkpoints keep DeepSeek's own tensor names (`embed.weight`,
`layers.N.attn.wq_a.weight`, `X.scale` block grids, `ffn.experts.E.w1.weight`), its rank tensors vLLM 0.33's
(docs/families/deepseek_v4.md). verify reads ranks by the engine's names, so the checkpoint is seen through
this mapping; its ue8m0 (F8_E8M0) block scales are powers of two, and its MXFP4 experts (I8 codes, E8M0
scales per 32 values) are decoded exactly."""
import re

import torch

from .verify_math import decode_mxfp4

ARCH = "DeepseekV4ForCausalLM"

_MODEL = {"model.embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight",
          "model.norm.weight": "norm.weight"}
_MODEL_BACK = {v: k for k, v in _MODEL.items()}
_BIAS = ("ffn.gate.e_score_correction_bias", "ffn.gate.bias")
_MXFP4_EXPERT = re.compile(r"layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight")


def e8m0_to_float(codes):
    """float32 2^(b - 127) of E8M0 bytes (uint8); 0xFF is NaN, as the format says."""
    out = torch.pow(2.0, codes.to(torch.float32) - 127)
    return torch.where(codes == 0xFF, torch.full_like(out, float("nan")), out)


class Names:
    """Engine name <-> checkpoint name of one checkpoint (`ckpt`: a safetensors_io.Checkpoint)."""

    def __init__(self, ckpt):
        self.ckpt = ckpt
        # ue8m0 grids beside MXFP4 experts (expert_dtype fp4), float32 ones beside FP8 experts.
        self.e8m0 = any(ckpt.dtype(n) == "F8_E8M0" for n in ckpt.where if n.endswith(".scale") and
                        not _MXFP4_EXPERT.fullmatch(n[:-len("scale")] + "weight"))

    def _block_scaled(self, weight):
        """Whether checkpoint weight `weight` is a block-FP8 one (its X.scale is a block grid)."""
        return weight in self.ckpt.where and self.ckpt.dtype(weight) == "F8_E4M3"

    def to_checkpoint(self, name):
        if name in _MODEL:
            return _MODEL[name]
        if name.startswith("model.hc_head_"):
            return name[len("model."):]
        if not name.startswith("model.layers."):
            return name
        name = name[len("model."):]
        if name.endswith(_BIAS[0]):
            return name[:-len(_BIAS[0])] + _BIAS[1]
        if name.endswith(".weight_scale_inv"):
            base = name[:-len("weight_scale_inv")]
            return base + "scale" if self._block_scaled(base + "weight") else name
        return name

    def to_engine(self, name):
        """The engine's name of a checkpoint tensor; None for one the model does not load (mtp.*)."""
        if name in _MODEL_BACK:
            return _MODEL_BACK[name]
        if name.startswith("hc_head_"):
            return "model." + name
        if not name.startswith("layers."):
            return None
        if name.endswith(_BIAS[1]):
            name = name[:-len(_BIAS[1])] + _BIAS[0]
        elif name.endswith(".scale") and self._block_scaled(name[:-len("scale")] + "weight"):
            name = name[:-len("scale")] + "weight_scale_inv"
        return "model." + name

    def is_mxfp4_expert(self, ckpt_name):
        return _MXFP4_EXPERT.fullmatch(ckpt_name) is not None and self.ckpt.dtype(ckpt_name) == "I8"

    def get(self, ckpt_name):
        """A checkpoint tensor as verify computes with it: MXFP4 expert codes decoded ([out, in], float64),
        ue8m0 grids as float32 powers of two, the rest as read."""
        t = self.ckpt.get(ckpt_name)
        if self.is_mxfp4_expert(ckpt_name):
            codes = t.view(torch.uint8)
            scales = self.ckpt.get(ckpt_name[:-len("weight")] + "scale")
            return decode_mxfp4(codes.reshape(codes.shape[0], -1, 16), scales)
        if self.ckpt.dtype(ckpt_name) == "F8_E8M0":
            return e8m0_to_float(t)
        return t


def rank_scales_as_float(rank):
    """A rank's ue8m0 block grids (uint8 bytes under X.weight_scale_inv) as float32 powers of two, so that
    verify's FP8 dequantization reads them as the float32 grids of the other families."""
    return {n: e8m0_to_float(t) if n.endswith(".weight_scale_inv") and t.dtype == torch.uint8 else t
            for n, t in rank.items()}


# Rank modules (after "model.layers.{i}.") -> (kind, group, checkpoint parts), as verify_layout.classify.
def classify(mod):
    if mod == "attn.fused_wqa_wkv":  # replicated (vLLM's disable_tp)
        return "column", "replicated", ["attn.wq_a", "attn.wkv"]
    m = re.fullmatch(r"attn\.(indexer\.)?compressor\.fused_wkv_wgate", mod)
    if m:
        p = mod[:-len("fused_wkv_wgate")]
        return "column", "replicated", [p + "wkv", p + "wgate"]
    if mod in ("attn.indexer.wq_b", "attn.indexer.weights_proj"):
        return "column", "replicated", [mod]
    if mod in ("attn.wq_b", "attn.wo_a"):  # heads, and wo_a's whole output groups, a rank
        return "column", "attention", [mod]
    if mod == "attn.wo_b":
        return "row", "attention", [mod]
    if mod == "ffn.shared_experts.gate_up_proj":
        return "column", "shared_experts", ["ffn.shared_experts.w1", "ffn.shared_experts.w3"]
    if mod == "ffn.shared_experts.down_proj":
        return "row", "shared_experts", ["ffn.shared_experts.w2"]
    return None


# Replicated tensors named without .weight: the hyper-connection mixers, the compressors' ape, the hash
# routing table (int32) and the score bias.
BARE_VALUES = re.compile(r"hc_(attn|ffn)_(fn|base|scale)|attn\.(indexer\.)?compressor\.ape|ffn\.gate\.tid2eid")
