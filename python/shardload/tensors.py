"""Rank tensors as torch and NumPy arrays, sharing shardload's memory (DLPack): no copy is made, and the
memory stays valid while any array that shares it is alive."""
import numpy

from .errors import InvalidArgumentError

try:
    import torch
except ImportError:  # NumPy alone is enough for everything but the torch helpers
    torch = None

FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")


def to_torch(tensor):
    """A torch tensor sharing the bytes. FP8 comes as uint8, with the shardload dtype name in its
    `shardload_dtype` attribute (as_float8 views it as torch.float8_e4m3fn where torch has it)."""
    if torch is None:
        raise InvalidArgumentError("torch is not installed", field="torch")
    out = torch.from_dlpack(tensor)
    if tensor.dtype in FP8_DTYPES:
        out.shardload_dtype = tensor.dtype
    return out


def to_numpy(tensor, *, bits=False):
    """A NumPy array sharing the bytes. NumPy has no bfloat16: a BF16 tensor is an error unless
    bits=True, which gives its uint16 bit patterns. FP8 comes as uint8."""
    if tensor.dtype == "BF16":
        if not bits:
            raise InvalidArgumentError(
                "NumPy has no bfloat16; pass bits=True for the uint16 bits, or use to_torch",
                tensor=tensor.name, field="dtype", expected="a NumPy dtype",
                found="BF16")
        tensor = tensor.reinterpret("U16")
    return numpy.from_dlpack(tensor)


# F8_E8M0: DeepSeek-V4's ue8m0 block scales (powers of two), bytes the engines hold as float8_e8m0fnu.
_FLOAT8 = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}

def as_float8(t):
    """The FP8 tensor `t` (uint8 bytes, as views and FP8 targets are) viewed as torch's float8
    dtype (`torch.float8_e4m3fn` for F8_E4M3, `float8_e5m2` for F8_E5M2, `float8_e8m0fnu` for F8_E8M0),
    sharing memory. The FP8
    flavour is `t.shardload_dtype` (set on every view) or `dtype`. Raises InvalidArgumentError when
    `t` is not FP8 bytes or the installed torch has no such dtype."""
    if torch is None:
        raise InvalidArgumentError("torch is not installed", field="torch")
    name = getattr(t, "shardload_dtype", None) or "F8_E4M3"
    if name not in _FLOAT8 or t.dtype != torch.uint8:
        raise InvalidArgumentError("not FP8 bytes", field="dtype", expected="a uint8 view of F8_E4M3, F8_E5M2 or F8_E8M0",
                                   found=f"{name} as {t.dtype}")
    torch_dtype = getattr(torch, _FLOAT8[name], None)
    if torch_dtype is None:
        raise InvalidArgumentError(
            f"torch {torch.__version__} has no {_FLOAT8[name]} (torch 2.1 or later has it)",
            field="dtype", expected=f"torch.{_FLOAT8[name]}", found=name)
    return t.view(torch_dtype)
