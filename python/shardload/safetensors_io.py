"""A bounded pure-Python safetensors reader and writer returning torch tensors.

Used by `shardload.verify`, which must read a checkpoint and an export without the C++ extension. Files are
hostile input: the header length is capped before anything is allocated, the JSON is parsed only after that
check, and every entry's dtype, shape and offsets are validated (contiguous, covering the data section exactly,
as the official safetensors crate requires) before a byte of data is read; only regular files are read.
"""
import json
import math
import os
import stat

import numpy as np
import torch

from .errors import FormatError

MAX_HEADER_BYTES = 100_000_000

# safetensors dtype -> (item size, NumPy dtype of the raw bits, torch dtype the bits are viewed as or None).
# F8_E4M3 has no torch 1.13 dtype: it stays uint8 codes (decode with fp8_e4m3_to_float).
_DTYPES = {
    "F64": (8, np.float64, None), "F32": (4, np.float32, None), "F16": (2, np.float16, None),
    "BF16": (2, np.int16, torch.bfloat16), "I64": (8, np.int64, None), "I32": (4, np.int32, None),
    "I16": (2, np.int16, None), "I8": (1, np.int8, None), "U8": (1, np.uint8, None),
    "BOOL": (1, np.bool_, None), "F8_E4M3": (1, np.uint8, None),
    # DeepSeek-V4's ue8m0 block and MXFP4 scales (powers of two): bytes, as F8_E4M3.
    "F8_E8M0": (1, np.uint8, None),
}
_TORCH_TO_ST = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                torch.uint8: "U8", torch.bool: "BOOL"}


class SafetensorsError(FormatError, ValueError):
    """A malformed or unexpected safetensors file, with the fields shardload's C++ errors carry."""

    def __init__(self, message, *, kind="format", file=None, tensor=None, field=None, expected=None,
                 found=None):
        super().__init__(message, kind=kind, file=file or "", tensor=tensor or "", field=field or "",
                         expected="" if expected is None else expected, found="" if found is None else found)


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def open_regular(path):
    """Opens a regular file for reading. Symlinks are followed, as the C++ reader does, because Hugging Face
    caches are symlinks to blobs; anything but a regular file (a FIFO, a device) is refused without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SafetensorsError(f"cannot open: {e.strerror}", kind="io", file=str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SafetensorsError("not a regular file", kind="io", file=str(path))
    return fd


def _pread_exact(fd, size, offset, path):
    out = bytearray()
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            raise SafetensorsError("file shorter than its header says", file=str(path), expected=offset + size,
                                   found=offset + len(out))
        out += chunk
    return bytes(out)


def _parse_entry(path, name, entry, data_size):
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError("entry must have exactly dtype, shape, data_offsets", file=path, tensor=name)
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in _DTYPES:
        raise SafetensorsError("unknown dtype", file=path, tensor=name, field="dtype")
    if not isinstance(shape, list) or any(type(d) is not int or d < 0 for d in shape):
        raise SafetensorsError("shape must be a list of non-negative integers", file=path, tensor=name,
                               field="shape")
    if (not isinstance(offsets, list) or len(offsets) != 2 or any(type(o) is not int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise SafetensorsError("data_offsets out of the data section", file=path, tensor=name,
                               field="data_offsets", expected=f"0 <= begin <= end <= {data_size}")
    nbytes = math.prod(shape) * _DTYPES[dtype][0]
    if offsets[1] - offsets[0] != nbytes:
        raise SafetensorsError("data_offsets disagree with dtype and shape", file=path, tensor=name,
                               field="data_offsets", expected=nbytes, found=offsets[1] - offsets[0])
    return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])


class SafetensorsFile:
    """One validated file: `tensors` {name: TensorInfo}, `metadata` {str: str}; `get(name)` reads one tensor."""

    def __init__(self, path):
        self.path = str(path)
        fd = open_regular(self.path)
        try:
            size = os.fstat(fd).st_size
            if size < 8:
                raise SafetensorsError("file shorter than the 8-byte header length", file=self.path)
            (n,) = np.frombuffer(_pread_exact(fd, 8, 0, self.path), dtype="<u8")
            n = int(n)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise SafetensorsError("header length out of bounds", file=self.path, field="header_length",
                                       expected=f"<= min({MAX_HEADER_BYTES}, {size - 8})", found=n)
            raw = _pread_exact(fd, n, 8, self.path)
        finally:
            os.close(fd)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SafetensorsError("header is not valid UTF-8 JSON", file=self.path) from None
        if not isinstance(header, dict):
            raise SafetensorsError("header is not a JSON object", file=self.path)
        self.data_start = 8 + n
        data_size = size - self.data_start
        meta = header.pop("__metadata__", {})
        if not isinstance(meta, dict) or any(not isinstance(v, str) for v in meta.values()):
            raise SafetensorsError("__metadata__ must map strings to strings", file=self.path,
                                   field="__metadata__")
        self.metadata = meta
        self.tensors = {k: _parse_entry(self.path, k, v, data_size) for k, v in header.items()}
        # Contiguous and covering the data section exactly, as the official crate checks.
        end = 0
        for info in sorted(self.tensors.values(), key=lambda t: (t.begin, t.end)):
            if info.begin != end:
                raise SafetensorsError("tensors overlap or leave a gap", file=self.path, tensor=info.name,
                                       field="data_offsets", expected=end, found=info.begin)
            end = info.end
        if end != data_size:
            raise SafetensorsError("data section length disagrees with the header", file=self.path,
                                   expected=end, found=data_size)

    def get(self, name):
        """The tensor as torch: BF16 as torch.bfloat16, F8_E4M3 and F8_E8M0 as uint8 bytes, others as their dtype."""
        info = self.tensors[name]
        fd = open_regular(self.path)
        try:
            raw = _pread_exact(fd, info.end - info.begin, self.data_start + info.begin, self.path)
        finally:
            os.close(fd)
        _, np_dtype, view = _DTYPES[info.dtype]
        arr = np.frombuffer(raw, dtype=np.dtype(np_dtype).newbyteorder("<")).astype(np_dtype, copy=True)
        t = torch.from_numpy(arr.reshape(info.shape))
        return t.view(view) if view is not None else t

    def dtype(self, name):
        return self.tensors[name].dtype

    def shape(self, name):
        return list(self.tensors[name].shape)


def load_file(path):
    """{name: torch tensor} and the metadata of one file."""
    f = SafetensorsFile(path)
    return {name: f.get(name) for name in f.tensors}, dict(f.metadata)


def save_file(path, tensors, metadata=None, dtypes=None):
    """Writes {name: tensor}; `dtypes` {name: "F8_E4M3"} labels uint8 codes as FP8 (tests rewrite exports)."""
    dtypes = dtypes or {}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        st = dtypes.get(name) or _TORCH_TO_ST[t.dtype]
        bits = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        blob = bits.numpy().astype(bits.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(len(raw).to_bytes(8, "little"))
        out.write(raw)
        for blob in blobs:
            out.write(blob)


class Checkpoint:
    """A model directory read through model.safetensors.index.json (or its single .safetensors file)."""

    def __init__(self, model_dir):
        self.dir = str(model_dir)
        index = os.path.join(self.dir, "model.safetensors.index.json")
        self._files = {}
        self.where = {}
        if os.path.exists(index):
            with open(open_regular(index), "rb", closefd=True) as f:
                raw = f.read(MAX_HEADER_BYTES + 1)
            if len(raw) > MAX_HEADER_BYTES:
                raise SafetensorsError("index too large", file=index)
            try:
                weight_map = json.loads(raw)["weight_map"]
            except (ValueError, KeyError, TypeError):
                raise SafetensorsError("index has no weight_map object", file=index) from None
            if not isinstance(weight_map, dict):
                raise SafetensorsError("weight_map is not an object", file=index)
            for name, fname in weight_map.items():
                if not isinstance(fname, str) or os.path.basename(fname) != fname:
                    raise SafetensorsError("weight_map names a file outside the directory", file=index,
                                           tensor=name)
                self.where[name] = fname
        else:
            files = [f for f in os.listdir(self.dir) if f.endswith(".safetensors")]
            if len(files) != 1:
                raise SafetensorsError("no index and not exactly one .safetensors file", file=self.dir)
            self.where = {n: files[0] for n in self._file(files[0]).tensors}
        for name, fname in self.where.items():
            if name not in self._file(fname).tensors:
                raise SafetensorsError("tensor named by the index is missing from its file", file=fname,
                                       tensor=name)
        with open(open_regular(os.path.join(self.dir, "config.json")), "rb", closefd=True) as f:
            self.config = json.loads(f.read(MAX_HEADER_BYTES))
        # NVIDIA ModelOpt may keep its quantization config beside config.json (as shardload reads it).
        hf_quant = os.path.join(self.dir, "hf_quant_config.json")
        if isinstance(self.config, dict) and not self.config.get("quantization_config") and os.path.isfile(hf_quant):
            with open(open_regular(hf_quant), "rb", closefd=True) as f:
                quant = json.loads(f.read(MAX_HEADER_BYTES))
            if isinstance(quant, dict) and (quant.get("producer") or {}).get("name") == "modelopt":
                self.config["quantization_config"] = {"quant_method": "modelopt", **quant}

    def _file(self, fname):
        if fname not in self._files:
            self._files[fname] = SafetensorsFile(os.path.join(self.dir, fname))
        return self._files[fname]

    def __contains__(self, name):
        return name in self.where

    def dtype(self, name):
        return self._file(self.where[name]).dtype(name)

    def shape(self, name):
        return self._file(self.where[name]).shape(name)

    def get(self, name):
        if name not in self.where:
            raise SafetensorsError("checkpoint has no such tensor", kind="not_found", file=self.dir, tensor=name)
        return self._file(self.where[name]).get(name)
