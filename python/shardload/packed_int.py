"""Integer weights packed into int32 words (compressed-tensors pack-quantized: llm-compressor's W4A16, W8A16,
Kimi-K2.5's experts), dequantized for `shardload.verify` in float64, checkpoint and rank tensors alike.

A weight [..., N, K] is stored as `weight_packed` int32 [..., N, K / pf] (pf = 32 / bits values a word, value
j of a word at bits bits*j, each stored offset by 2^(bits-1)), `weight_scale` [..., N, K / group] ([..., N, 1]
per channel), with zero points `weight_zero_point` int32 [..., N / pf, K / group] packed along N, and
`weight_shape` [N, K] (int64; vLLM's MoE keeps it per expert in the model dtype). The value is
(code - zero point) * scale.

NVFP4 (compressed-tensors nvfp4-pack-quantized) packs FP4 E2M1 codes two a byte along K (`weight_packed` uint8
[..., N, K / 2], value 2j in the low nibble), with an FP8 E4M3 scale per 16 inputs (`weight_scale`, uint8
codes here) and a float32 `weight_global_scale` per projection: the value is code * scale * (1 / global). A
rank keeps each fused part's global scale ([parts], experts [E, 2] / [E]): its weight is dequantized without
them and `X.weight_scale` becomes 1 / global, per part, for the verifier to apply as FP8's per-part scales.

NVIDIA ModelOpt's NVFP4 stores the same bytes and group scales as `weight` and `weight_scale`, and per projection
`weight_scale_2` and `input_scale`, the reciprocals of compressed-tensors' global scales: the value is
code * scale * scale_2. A rank keeps each part's scale_2 ([parts], experts [E, 2] / [E]), which becomes
`X.weight_scale` for the verifier as above.

GPTQ stores its words input-major: `qweight` int32 [..., K / pf, N] packed along K, `scales` [..., K / group, N]
([..., 1, N] per channel), `qzeros` int32 [..., K / group, N / pf] packed along N holding zero - 1 (its v1
format), and ranks keep them so (vLLM's AutoGPTQ methods). The value of input k, output n is
(code - (zero + 1)) * scale: code * scale for symmetric weights, whose stored zeros are all 2^(bits-1) - 1.

AWQ (GEMM) stores them input-major too but packs words along N: `qweight` int32 [..., K, N / 8] (nibble j of
word c holds output 8c + [0, 2, 4, 6, 1, 3, 5, 7][j]), `qzeros` [..., K / group, N / 8] the same way, `scales`
[..., K / group, N]; the value is (code - zero) * scale (code - 8 without zero points).
"""
import torch

from .fp8 import decode_e4m3

SUFFIXES = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_global_scale",
            "input_global_scale")
GPTQ_SUFFIXES = ("qweight", "scales", "qzeros", "g_idx")
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


class Scheme:
    """bits, group (None: one scale per row) and zero points, from config.json's quantization_config; None
    when the checkpoint holds no packed integers. nvfp4: FP4 weights in 16-value groups (nvfp4-pack-quantized)."""

    def __init__(self, bits, group, zero_points, nvfp4=False, gptq=False, awq=False, modelopt=False):
        self.bits, self.group, self.zero_points, self.nvfp4 = bits, group, zero_points, nvfp4
        self.gptq, self.awq, self.modelopt = gptq, awq, modelopt

    @property
    def weight_suffix(self):
        """What X.weight is called packed: X.qweight (GPTQ), X.weight_packed."""
        return "qweight" if self.gptq or self.awq else "weight" if self.modelopt else "weight_packed"

    @staticmethod
    def of(config):
        # A multimodal config's may be in its text_config only (Kimi-K2.5's).
        text = config.get("text_config") or {}
        q = (config.get("quantization_config") or config.get("compression_config") or
             text.get("quantization_config") or {})
        if q.get("quant_method") == "awq":
            return Scheme(4, q.get("group_size", q.get("q_group_size")), bool(q.get("zero_point")), awq=True)
        if str(q.get("quant_method", "")).startswith("modelopt"):  # NVFP4, the only ModelOpt algo loaded
            return Scheme(4, 16, False, nvfp4=True, modelopt=True)
        if q.get("quant_method") == "gptq":
            group = q.get("group_size", 128)
            return Scheme(int(q.get("bits", 4)), None if group == -1 else group, True, gptq=True)
        if q.get("quant_method") != "compressed-tensors":
            return None
        if q.get("format") == "nvfp4-pack-quantized":
            return Scheme(4, 16, False, nvfp4=True)
        if q.get("format") != "pack-quantized":
            return None
        weights = next(iter(q.get("config_groups", {}).values()), {}).get("weights", {})
        group = weights.get("group_size") if weights.get("strategy") == "group" else None
        return Scheme(int(weights.get("num_bits", 4)), group, not weights.get("symmetric", True))


def fp4_values(packed, scale):
    """float64 [..., N, K] of NVFP4 bytes [..., N, K / 2] times their FP8 group scales [..., N, K / 16] (uint8
    codes), without the global scale."""
    b = packed.to(torch.int64)
    codes = torch.stack([b & 0x0F, b >> 4], dim=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)
    values = torch.tensor(_E2M1, dtype=torch.float64)[codes]
    if scale.shape[-1] * 16 != values.shape[-1] or scale.shape[-2] != values.shape[-2]:
        raise ValueError(f"scales {list(scale.shape)} do not cover a weight of {list(values.shape[-2:])} in "
                         f"16-value groups")
    return values * decode_e4m3(scale.contiguous()).double().repeat_interleave(16, dim=-1)


def dequantize_nvfp4(packed, scale, global_scale):
    """float64 [N, K] of one checkpoint projection: code * scale * (1 / global), as a rank's is computed."""
    return fp4_values(packed, scale) * (1.0 / global_scale.double().reshape(()))


def dequantize_modelopt(weight, scale, scale_2):
    """float64 [N, K] of one ModelOpt checkpoint projection: code * scale * scale_2."""
    return fp4_values(weight, scale) * scale_2.double().reshape(())


def dequantized_modelopt(tensors):
    """dequantized() for ModelOpt NVFP4: each quantized X.weight (one with X.weight_scale_2; experts
    X.w13_weight ...) as float64 without its scale_2, which becomes X.weight_scale per part; X.input_scale
    dropped."""
    out = dict(tensors)
    for name in tensors:
        if not name.endswith("weight") or name + "_scale_2" not in tensors:
            continue
        out[name] = fp4_values(tensors[name], tensors[name + "_scale"])
        out[name + "_scale"] = tensors[name + "_scale_2"].double()
        del out[name + "_scale_2"]
        out.pop(name[:-len("weight")] + "input_scale", None)
    return out


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


def dequantize_gptq(qweight, scales, qzeros, scheme):
    """float64 [..., N, K] of one GPTQ weight stored input-major (module docstring)."""
    q = unpack(qweight, scheme.bits, dim=-2)  # [..., K, N]
    k, n = q.shape[-2], q.shape[-1]
    group = k if scheme.group is None else scheme.group
    if scales.shape[-2] * group != k or scales.shape[-1] != n:
        raise ValueError(f"scales {list(scales.shape)} do not cover an input-major weight of {[k, n]} in "
                         f"{group}-value groups")
    z = unpack(qzeros, scheme.bits)  # [..., K / group, N]
    if z.shape[-2:] != scales.shape[-2:]:
        raise ValueError(f"zero points {list(qzeros.shape)} do not cover {list(scales.shape[-2:])} groups")
    values = (q - (z + 1).repeat_interleave(group, dim=-2)).double() * \
        scales.double().repeat_interleave(group, dim=-2)
    return values.transpose(-1, -2)


_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def unpack_awq(words):
    """Codes (int64, as stored: 0..15) of AWQ words [..., R, C] packed along the last dim in AWQ's order."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    nibbles = (w.unsqueeze(-1) >> (torch.arange(8, dtype=torch.int64) * 4)) & 0xF  # [..., R, C, j]
    codes = torch.empty_like(nibbles)
    codes[..., list(_AWQ_ORDER)] = nibbles  # nibble j is output 8c + order[j]
    return codes.reshape(*words.shape[:-1], words.shape[-1] * 8)


def dequantize_awq(qweight, scales, qzeros, scheme):
    """float64 [..., N, K] of one AWQ weight stored input-major, packed along N (module docstring)."""
    q = unpack_awq(qweight)  # [..., K, N]
    k, n = q.shape[-2], q.shape[-1]
    group = scheme.group
    if scales.shape[-2] * group != k or scales.shape[-1] != n:
        raise ValueError(f"scales {list(scales.shape)} do not cover an input-major weight of {[k, n]} in "
                         f"{group}-value groups")
    z = unpack_awq(qzeros)
    if z.shape[-2:] != scales.shape[-2:]:
        raise ValueError(f"zero points {list(qzeros.shape)} do not cover {list(scales.shape[-2:])} groups")
    if not scheme.zero_points:  # zero_point false: the engines' uint4b8, codes offset by 8 whatever qzeros holds
        z = torch.full_like(z, 8)
    values = (q - z.repeat_interleave(group, dim=-2)).double() * scales.double().repeat_interleave(group, dim=-2)
    return values.transpose(-1, -2)


def dequantized(tensors, scheme, shapes=None):
    """A copy of a rank's (or checkpoint's) {name: tensor} with each packed weight X.weight_packed (with its
    scale, zero points and shape) replaced by X.weight in float64. `shapes`: every [N, K] the checkpoint's
    weight_shape tensors hold; a weight_shape outside it is an error (None: not checked)."""
    if scheme.modelopt:
        return dequantized_modelopt(tensors)
    if scheme.gptq or scheme.awq:  # X.qweight, X.scales, X.qzeros (experts: X.w13_qweight, ...) -> X.weight
        out = {n: t for n, t in tensors.items() if not any(n.endswith(s) for s in GPTQ_SUFFIXES)}
        dequantize_input_major = dequantize_awq if scheme.awq else dequantize_gptq
        for name in tensors:
            if name.endswith("qweight"):
                base = name[:-len("qweight")]
                out[base + "weight"] = dequantize_input_major(tensors[name], tensors[base + "scales"],
                                                              tensors[base + "qzeros"], scheme)
        return out
    out = {n: t for n, t in tensors.items() if not any(n.endswith(s) for s in SUFFIXES)}
    for name in tensors:
        if not name.endswith("weight_packed"):
            continue
        base = name[:-len("packed")]  # "X.weight_", "X.w13_weight_"
        if scheme.nvfp4:
            out[base[:-1]] = fp4_values(tensors[name], tensors[base + "scale"])
            out[base + "scale"] = 1.0 / tensors[base + "global_scale"].double()
            continue
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
