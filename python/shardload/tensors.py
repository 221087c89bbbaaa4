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
        raise InvalidArgumentError("torch is not installed", kind="invalid_argument", field="torch")
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
                f"{tensor.name}: NumPy has no bfloat16; pass bits=True for the uint16 bits, or use to_torch",
                kind="invalid_argument", tensor=tensor.name, field="dtype", expected="a NumPy dtype",
                found="BF16")
        tensor = tensor.reinterpret("U16")
    return numpy.from_dlpack(tensor)


def as_float8(t):
    """A uint8 torch tensor of FP8 e4m3 bytes viewed as torch.float8_e4m3fn (torch >= 2.1)."""
    if torch is None or not hasattr(torch, "float8_e4m3fn"):
        version = getattr(torch, "__version__", "none")
        raise InvalidArgumentError(
            f"this torch ({version}) has no float8_e4m3fn: keep the uint8 bytes (decode with the scales)",
            kind="invalid_argument", field="dtype", expected="torch >= 2.1", found=version)
    if t.dtype != torch.uint8:
        raise InvalidArgumentError("as_float8 takes the uint8 bytes of an FP8 tensor", kind="invalid_argument",
                                   field="dtype", expected="torch.uint8", found=str(t.dtype))
    return t.view(torch.float8_e4m3fn)
