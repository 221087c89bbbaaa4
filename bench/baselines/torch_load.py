"""Baseline: load a shardload plan the way a PyTorch inference engine loads weights.

Each safetensors file is mapped (mmap), its header parsed, every source tensor made a 2-D
[rows, cols] tensor over the map with torch.frombuffer, and for every rank every parameter is
allocated with torch.empty (torch.zeros when the plan leaves part of it uncovered, i.e. padding)
and filled with one narrow(...).copy_(...) per plan piece, on torch.set_num_threads(2).

    torch_load.py PLAN_JSON MODEL_DIR [--verify CHECKSUMS]

PLAN_JSON comes from `shardload plan MODEL --tp T --ep E --json`; reading it is not timed (an engine
knows its parameters). Timed: opening the files, parsing the headers, mapping, allocating every
parameter and all copies. Prints one line: "<seconds> <param bytes> <cpu seconds>" (CPU time of
the timed span). --verify compares the XXH3-64 of every parameter (afterwards, not timed) with
the output of `shardload load MODEL --tp T --ep E --checksum`.
"""
import argparse
import ctypes
import json
import mmap
import os
import struct
import sys
import time
import warnings

import torch

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
          "F64": torch.float64, "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
ITEMSIZE = {name: torch.empty(0, dtype=dtype).element_size() for name, dtype in DTYPES.items()}
# Casts an engine's copy_ does on the way (the plan keeps the q/k norms in fp32); anything else fails.
CASTS = {("BF16", "F32"), ("F16", "F32")}


def open_sources(model_dir):
    """Map every safetensors file and return {tensor name: (dtype name, 2-D tensor)}."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        with open(os.path.join(model_dir, name), "rb") as f:
            header_len = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(header_len))
            # ACCESS_COPY: a private mapping torch.frombuffer accepts as writable; nothing writes it.
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        base = 8 + header_len
        for tensor, meta in header.items():
            if tensor == "__metadata__":
                continue
            begin, end = meta["data_offsets"]
            shape = meta["shape"]
            rows = shape[0] if shape else 1
            flat = torch.frombuffer(data, dtype=DTYPES[meta["dtype"]], offset=base + begin,
                                    count=(end - begin) // ITEMSIZE[meta["dtype"]])
            tensors[tensor] = (meta["dtype"], flat.view(rows, -1))
    return tensors


def load(plan, model_dir):
    """Allocate and fill every parameter of every rank; returns {(rank, name): tensor}."""
    sources = open_sources(model_dir)
    params = {}
    for rank in plan["ranks"]:
        for param in rank["params"]:
            dtype = DTYPES[param["dtype"]]
            covered = sum((p["rows"][1] - p["rows"][0]) * (p["cols"][1] - p["cols"][0])
                          for p in param["pieces"]) * ITEMSIZE[param["dtype"]]
            alloc = torch.empty if covered == param["bytes"] else torch.zeros
            tensor = alloc(param["shape"], dtype=dtype)
            flat = tensor.view(-1)
            for piece in param["pieces"]:
                src_dtype, src = sources[piece["source"]]
                if src_dtype != param["dtype"] and (src_dtype, param["dtype"]) not in CASTS:
                    sys.exit(f"torch_load: {piece['source']} is {src_dtype}, {param['name']} is "
                             f"{param['dtype']}: this baseline does no such cast")
                (r0, r1), (c0, c1) = piece["rows"], piece["cols"]
                start = piece["dst_offset"] // ITEMSIZE[param["dtype"]]
                dst = flat.narrow(0, start, (r1 - r0) * (c1 - c0)).view(r1 - r0, c1 - c0)
                dst.copy_(src.narrow(0, r0, r1 - r0).narrow(1, c0, c1 - c0))
            params[(rank["rank"], param["name"])] = tensor
    return params


def verify(params, checksum_path):
    """Compare each parameter's XXH3-64 with shardload's --checksum lines; exit 1 on a mismatch."""
    xxh3 = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
    xxh3.restype, xxh3.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_size_t]
    expected = {}
    with open(checksum_path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5:  # rank, name, dtype, shape, hash; skips the summary line
                expected[(int(fields[0]), fields[1])] = int(fields[4], 16)
    bad = [key for key, t in params.items()
           if xxh3(t.data_ptr(), t.numel() * t.element_size()) != expected.get(key)]
    if bad or len(expected) != len(params):
        sys.exit(f"torch_load: {len(bad)} of {len(params)} parameters differ from shardload "
                 f"({len(expected)} checksums), first: {bad[:3]}")
    print(f"torch_load: verified {len(params)} parameters against shardload", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("model")
    parser.add_argument("--verify")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore", category=UserWarning)  # frombuffer's note on shared memory
    with open(args.plan) as f:
        plan = json.load(f)
    cpu0, start = os.times(), time.perf_counter()
    params = load(plan, args.model)
    seconds, cpu1 = time.perf_counter() - start, os.times()
    nbytes = sum(t.numel() * t.element_size() for t in params.values())
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(f"{seconds:.4f} {nbytes} {cpu:.3f}", flush=True)
    if args.verify:
        verify(params, args.verify)


if __name__ == "__main__":
    main()
