"""Integer weights packed into int32 words (compressed-tensors pack-quantized: llm-compressor's W4A16, W8A16,
Kimi-K2.5's experts), dequantized for `shardload.verify` in float64, checkpoint and rank tensors alike.

A weight [..., N, K] is stored as `weight_packed` int32 [..., N, K / pf] (pf = 32 / bits values a word, value
j of a word at bits bits*j, each stored offset by 2^(bits-1)), `weight_scale` [..., N, K / group] ([..., N, 1]
per channel), with zero points `weight_zero_point` int32 [..., N / pf, K / group] packed along N, and
`weight_shape` [N, K] (int64; vLLM's MoE keeps it per expert in the model dtype). The value is
(code - zero point) * scale.
"""
import torch

SUFFIXES = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")


class Scheme:
    """bits, group (None: one scale per row) and zero points, from config.json's quantization_config; None
    when the checkpoint holds no packed integers."""

    def __init__(self, bits, group, zero_points):
        self.bits, self.group, self.zero_points = bits, group, zero_points

    @staticmethod
    def of(config):
        # A multimodal config's may be in its text_config only (Kimi-K2.5's).
        text = config.get("text_config") or {}
        q = (config.get("quantization_config") or config.get("compression_config") or
             text.get("quantization_config") or {})
        if q.get("quant_method") != "compressed-tensors" or q.get("format") != "pack-quantized":
            return None
        weights = next(iter(q.get("config_groups", {}).values()), {}).get("weights", {})
        group = weights.get("group_size") if weights.get("strategy") == "group" else None
        return Scheme(int(weights.get("num_bits", 4)), group, not weights.get("symmetric", True))


def unpack(words, bits, dim=-1):
    """Signed codes (int64) of int32 words packed along `dim` (-1 or -2)."""
    if dim == -2:
        return unpack(words.transpose(-1, -2), bits).transpose(-1, -2)
    pf = 32 // bits
    w = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(pf, dtype=torch.int64) * bits
    codes = (w.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(*words.shape[:-1], words.shape[-1] * pf) - (1 << (bits - 1))


def dequantize(packed, scale, zero, scheme):
    """float64 [..., N, K] of one packed weight and its scales (and zero points)."""
    q = unpack(packed, scheme.bits)
    n, k = q.shape[-2], q.shape[-1]
    group = k if scheme.group is None else scheme.group
    if scale.shape[-1] * group != k or scale.shape[-2] != n:
        raise ValueError(f"scales {list(scale.shape)} do not cover a weight of {[n, k]} in {group}-value groups")
    s = scale.double().repeat_interleave(group, dim=-1)
    if zero is None:
        return q.double() * s
    z = unpack(zero, scheme.bits, dim=-2)
    if z.shape[-2] < n or z.shape[-1] != scale.shape[-1]:
        raise ValueError(f"zero points {list(zero.shape)} do not cover {[n, scale.shape[-1]]} groups")
    z = z[..., :n, :].repeat_interleave(group, dim=-1)
    return (q - z).double() * s


def dequantized(tensors, scheme, shapes=None):
    """A copy of a rank's (or checkpoint's) {name: tensor} with each packed weight X.weight_packed (with its
    scale, zero points and shape) replaced by X.weight in float64. `shapes`: every [N, K] the checkpoint's
    weight_shape tensors hold; a weight_shape outside it is an error (None: not checked)."""
    out = {n: t for n, t in tensors.items() if not any(n.endswith(s) for s in SUFFIXES)}
    for name in tensors:
        if not name.endswith("weight_packed"):
            continue
        base = name[:-len("packed")]  # "X.weight_", "X.w13_weight_"
        zero = tensors.get(base + "zero_point") if scheme.zero_points else None
        if scheme.zero_points and zero is None:
            raise ValueError(f"{name}: asymmetric weights without {base}zero_point")
        out[base[:-1]] = dequantize(tensors[name], tensors[base + "scale"], zero, scheme)
        shape = tensors.get(base + "shape")
        if shape is not None and shapes is not None:
            for row in shape.reshape(-1, 2).double().tolist():
                if tuple(int(v) for v in row) not in shapes:
                    raise ValueError(f"{base}shape holds {row}: no part of the checkpoint has that shape")
    return out
