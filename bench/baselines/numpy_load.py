"""Baseline: load a shardload plan the way a NumPy-based Python inference engine loads weights.

Each safetensors file is opened with np.memmap, its header parsed, every source tensor viewed as a
2-D [rows, cols] array over the map, and for every rank every parameter is allocated with np.empty
(np.zeros when the plan leaves part of it uncovered, i.e. padding) and filled by one vectorised
slice copy per plan piece. bf16 has no NumPy dtype; it is copied as uint16 (the bytes are the same),
and widened to fp32 by a shift where the plan keeps a parameter (the q/k norms) in fp32.

    numpy_load.py PLAN_JSON MODEL_DIR [--verify CHECKSUMS]

PLAN_JSON comes from `shardload plan MODEL --tp T --ep E --json`; reading it is not timed (an engine
knows its parameters). Timed: opening the files, parsing the headers, mapping, allocating every
parameter and all copies. Prints one line: "<seconds> <param bytes> <cpu seconds>" (CPU time of
the timed span). --verify compares the XXH3-64 of every parameter (afterwards, not timed) with
the output of `shardload load MODEL --tp T --ep E --checksum`.
"""
import sys

import numpy as np

from common import run, shard_headers

DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
          "I8": np.int8, "U8": np.uint8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
          "BOOL": np.bool_, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}


def open_sources(model_dir):
    """Map every safetensors file and return {tensor name: (dtype name, 2-D view)}."""
    tensors = {}
    for path, header, base in shard_headers(model_dir):
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for tensor, meta in header.items():
            begin, end = meta["data_offsets"]
            shape = meta["shape"]
            rows = shape[0] if shape else 1
            flat = data[base + begin:base + end].view(DTYPES[meta["dtype"]])
            tensors[tensor] = (meta["dtype"], flat.reshape(rows, -1))
    return tensors


def load(plan, model_dir):
    """Allocate and fill every parameter of every rank; returns {(rank, name): array}."""
    sources = open_sources(model_dir)
    params = {}
    for rank in plan["ranks"]:
        for param in rank["params"]:
            dtype = DTYPES[param["dtype"]]
            covered = sum((p["rows"][1] - p["rows"][0]) * (p["cols"][1] - p["cols"][0])
                          for p in param["pieces"]) * np.dtype(dtype).itemsize
            alloc = np.empty if covered == param["bytes"] else np.zeros
            array = alloc(param["shape"], dtype=dtype)
            flat = array.reshape(-1)
            for piece in param["pieces"]:
                src_dtype, src = sources[piece["source"]]
                (r0, r1), (c0, c1) = piece["rows"], piece["cols"]
                start = piece["dst_offset"] // flat.itemsize
                pitch = piece.get("dst_pitch", c1 - c0)  # a column block of an input-major tensor (GPTQ)
                dst = np.lib.stride_tricks.as_strided(flat[start:], (r1 - r0, c1 - c0),
                                                      (pitch * flat.itemsize, flat.itemsize))
                if src_dtype == param["dtype"]:
                    np.copyto(dst, src[r0:r1, c0:c1])
                elif (src_dtype, param["dtype"]) == ("BF16", "F32"):  # norms kept in fp32
                    dst.view(np.uint32)[...] = src[r0:r1, c0:c1].astype(np.uint32) << 16
                else:
                    sys.exit(f"numpy_load: {piece['source']} is {src_dtype}, {param['name']} is "
                             f"{param['dtype']}: this baseline casts only bf16 to fp32")
            params[(rank["rank"], param["name"])] = array
    return params


def main():
    run(__doc__.splitlines()[0], "numpy_load", load, lambda a: (a.ctypes.data, a.nbytes))


if __name__ == "__main__":
    main()
