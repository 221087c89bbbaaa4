"""The arithmetic of `shardload.verify`: rank weights in float64, the error measure and the tolerances.

Error measure: per output feature c, ||y[:, c] - y_ref[:, c]|| / ||y_ref[:, c]|| with norms over the random
tokens. Per feature, so that one misplaced head, row or expert stands out at any model size; a norm over tokens
rather than a max, so that it estimates the relative error of the weight row (for isotropic inputs
E||dw . x||^2 = ||dw||^2), which a rounding bounds.

Tolerances, per feature, from what may legitimately differ between a rank value and the checkpoint's:
- identical values (same dtype, same FP8 codes and scales, widening casts): only float64 summation order
  differs, EXACT_TOLERANCE;
- a narrowing cast (e.g. an F32 router exported as BF16, --dtype): one rounding, at most the unit roundoff u of
  the rank dtype per element (2^-8 for BF16, 2^-11 for F16);
- FP8 requantization (static fused parts to the largest scale m, MoE w13 halves) or dynamic quantization: one
  e4m3 rounding (fp8.md), which moves a value by at most max(2^-4 |w|, 2^-10 s): half a unit in the last place
  for normal codes (3 mantissa bits) and half the subnormal spacing 2^-9 times the scale s for values that fall
  below the smallest normal after division by s (a requantization to a much larger scale pushes many there).
  The feature's bound is ||that bound over its row|| / ||row||.
Each bound is multiplied by SLACK = 1.25 for the sampling noise of Gaussian inputs on layers wider than the
token count (orthogonal inputs on narrower ones have none); real roundings measure 0.6-0.7 of the bound (FP8
requantization of make-tiny checkpoints), a misplaced head or expert gives errors of order 1.
"""
import torch

from .errors import Error
from .fp8 import BLOCK, decode_e4m3, expand_blocks

UNIT_ROUNDOFF = {"BF16": 2.0 ** -8, "F16": 2.0 ** -11, "F32": 2.0 ** -24, "F64": 2.0 ** -53}
E4M3_HALF_ULP = 2.0 ** -4
E4M3_HALF_SUBNORMAL = 2.0 ** -10
EXACT_TOLERANCE = 1e-9
SLACK = 1.25
_PRECISION = {"F8_E4M3": 0, "BF16": 1, "F16": 1, "F32": 2, "F64": 3}
_TORCH_DTYPE = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
                torch.uint8: "F8_E4M3", torch.int32: "I32", torch.int64: "I64"}


class VerifyError(Error):
    """The rank tensors cannot be checked at all (a tensor missing, a shape the layout does not explain)."""


def dtype_name(t):
    return _TORCH_DTYPE.get(t.dtype, str(t.dtype))


def narrowing(rank_dtype, ckpt_dtype):
    """Whether converting ckpt_dtype to rank_dtype may round (BF16 <-> F16 both ways: range or mantissa)."""
    a, b = _PRECISION.get(rank_dtype, 0), _PRECISION.get(ckpt_dtype, 0)
    return a < b or (a == b and rank_dtype != ckpt_dtype)


def _expand_block_rows(scale_inv, part_rows, cols):
    """Block scales of a fused weight as a [rows, cols] multiplier: part k uses the next ceil(rows_k/128)
    block rows (the rank layout cuts block scales per part)."""
    out, brow = [], 0
    for n in part_rows:
        nb = (n + BLOCK - 1) // BLOCK
        try:
            out.append(expand_blocks(scale_inv[brow:brow + nb], n, cols))
        except ValueError as e:
            raise VerifyError(f"block scale {list(scale_inv.shape)} for parts {list(part_rows)}: {e}") from None
        brow += nb
    if brow != scale_inv.shape[0]:
        raise VerifyError(f"block scale has {scale_inv.shape[0]} block rows, parts {list(part_rows)} use {brow}")
    return torch.cat(out, 0)


def _per_part_scale(scales, part_rows, cols, what):
    """Per-tensor ([1]) or per-part ([parts], MoE w13 [2]) scales as a [rows, cols] multiplier."""
    s = scales.double().reshape(-1)
    if s.numel() not in (1, len(part_rows)):
        raise VerifyError(f"{what}: {s.numel()} scales for {len(part_rows)} parts")
    rows = [torch.full((n, cols), s[min(k, s.numel() - 1)].item(), dtype=torch.float64)
            for k, n in enumerate(part_rows)]
    return torch.cat(rows, 0)


def dequant(codes, what, part_rows, scale=None, scale_inv=None):
    """(float64 weight, float64 per-element scale or None) of a 2-D rank or checkpoint weight. FP8 (uint8
    codes) needs `scale` (per tensor / per part) or `scale_inv` (128x128 blocks, per part); int8 codes a
    `scale` per row."""
    if codes.dtype == torch.int8:
        # compressed-tensors W8A8 int8: weight_scale [rows, 1], one scale per row, exact in float64.
        if scale is None or tuple(scale.shape) != (codes.shape[0], 1):
            raise VerifyError(f"{what} is int8 without a weight_scale of one value per row ({codes.shape[0]}, 1), "
                              f"found {None if scale is None else list(scale.shape)}")
        s = scale.double().expand(codes.shape[0], codes.shape[1])
        return codes.double() * s, s
    if codes.dtype == torch.float64 and scale is not None and scale.dtype == torch.float64:
        # NVFP4 on a rank: values dequantized but for each part's 1 / global scale ([parts] or [1]).
        s = _per_part_scale(scale, part_rows, codes.shape[1], what)
        return codes * s, s
    if codes.dtype != torch.uint8:
        return codes.double(), None
    if sum(part_rows) != codes.shape[0]:
        raise VerifyError(f"{what}: parts {list(part_rows)} do not cover {codes.shape[0]} rows")
    if scale is not None and scale.dim() == 2:
        # compressed-tensors: weight_scale [rows, 1] is one scale per row (channel); any other 2-D
        # weight_scale is a 128x128 block grid under the name the "fp8" format gives weight_scale_inv.
        if tuple(scale.shape) == (codes.shape[0], 1):
            s = scale.double().expand(codes.shape[0], codes.shape[1])
            return decode_e4m3(codes) * s, s
        scale, scale_inv = None, scale
    if scale_inv is not None:
        s = _expand_block_rows(scale_inv.double(), part_rows, codes.shape[1])
    elif scale is not None:
        s = _per_part_scale(scale, part_rows, codes.shape[1], what)
    else:
        raise VerifyError(f"{what} is FP8 without a weight scale")
    return decode_e4m3(codes) * s, s


_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def decode_mxfp4(blocks, scales):
    """float64 [..., groups * 32] of MXFP4 codes: blocks [..., groups, 16] uint8 (value 2j the low nibble of
    byte j, 2j + 1 the high one, each an E2M1 code) times 2^(scale - 127) per 32-value group (E8M0)."""
    table = torch.tensor(_E2M1, dtype=torch.float64)
    b = blocks.to(torch.int64)
    codes = torch.stack([b & 0x0F, b >> 4], dim=-1).reshape(*b.shape[:-1], 32)
    values = table[codes] * torch.pow(2.0, scales.to(torch.float64) - 127).unsqueeze(-1)
    return values.reshape(*b.shape[:-2], b.shape[-2] * 32)


def fp8_bound_sq(ref_rows, scale):
    """Per row, the squared norm of the one-rounding bound max(2^-4 |w|, 2^-10 s)."""
    bound = torch.maximum(E4M3_HALF_ULP * ref_rows.abs(), E4M3_HALF_SUBNORMAL * scale)
    return bound.pow(2).sum(1)


def fp8_tolerance(bound_sq, ref_sq):
    """SLACK * ||bound|| / ||row|| per feature (rows of zeros: 0, so that they must match exactly)."""
    return torch.where(ref_sq > 0, SLACK * (bound_sq / ref_sq.clamp_min(1e-300)).sqrt(),
                       torch.zeros_like(ref_sq))


def compare(y, ref, tol):
    """(error, tolerance) of the feature (column) with the largest error / tolerance."""
    if ref.numel() == 0:
        return 0.0, float(tol) if not torch.is_tensor(tol) else 0.0
    diff = (y - ref).norm(dim=0)
    scale = ref.norm(dim=0)
    if torch.isnan(diff).any():
        return float("inf"), float(tol if not torch.is_tensor(tol) else tol.max())
    zero = torch.zeros_like(diff)
    rel = torch.where(scale > 0, diff / scale.clamp_min(1e-300), torch.where(diff > 0, zero + float("inf"), zero))
    tol = tol if torch.is_tensor(tol) else torch.full_like(rel, float(tol))
    ratio = torch.where(tol > 0, rel / tol.clamp_min(1e-300), torch.where(rel > 0, zero + float("inf"), zero))
    i = int(ratio.argmax())
    return rel[i].item(), tol[i].item()
