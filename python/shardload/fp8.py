"""FP8 e4m3fn decoding and dequantization in float64 (docs/fp8.md), for torch versions without
float8 dtypes: codes are uint8 tensors and decode through a 256-entry table built from the bit layout."""
import math

import torch

BLOCK = 128


def _e4m3_value(code: int) -> float:
    # 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; 0x7F / 0xFF are NaN.
    sign = -1.0 if code & 0x80 else 1.0
    exp, man = (code >> 3) & 0xF, code & 0x7
    if exp == 0xF and man == 0x7:
        return math.nan
    if exp == 0:
        return sign * man * 2.0 ** -9  # subnormal: man/8 * 2^(1-7)
    return sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)


E4M3_TABLE = torch.tensor([_e4m3_value(c) for c in range(256)], dtype=torch.float64)


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3fn codes -> float64 values of the same shape."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"FP8 codes must be uint8, got {codes.dtype}")
    return E4M3_TABLE[codes.long()]


def expand_blocks(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A [ceil(rows/128), ceil(cols/128)] block scale as a [rows, cols] float64 multiplier."""
    want = ((rows + BLOCK - 1) // BLOCK, (cols + BLOCK - 1) // BLOCK)
    if tuple(scale.shape) != want:
        raise ValueError(f"block scale shape {list(scale.shape)}, expected {list(want)} for [{rows}, {cols}]")
    s = scale.double()
    return s.repeat_interleave(BLOCK, 0)[:rows].repeat_interleave(BLOCK, 1)[:, :cols]
