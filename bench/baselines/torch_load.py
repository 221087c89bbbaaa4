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
import mmap
import sys
import warnings

import torch

from common import run, shard_headers

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
          "F64": torch.float64, "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
ITEMSIZE = {name: torch.empty(0, dtype=dtype).element_size() for name, dtype in DTYPES.items()}
# Casts an engine's copy_ does on the way (the plan keeps the q/k norms in fp32); anything else fails.
CASTS = {("BF16", "F32"), ("F16", "F32")}


def open_sources(model_dir):
    """Map every safetensors file and return {tensor name: (dtype name, 2-D tensor)}."""
    tensors = {}
    for path, header, base in shard_headers(model_dir):
        with open(path, "rb") as f:
            # ACCESS_COPY: a private mapping torch.frombuffer accepts as writable; nothing writes it.
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        for tensor, meta in header.items():
            begin, end = meta["data_offsets"]
            shape = meta["shape"]
            rows = shape[0] if shape else 1
            flat = torch.frombuffer(data, dtype=DTYPES[meta["dtype"]], offset=base + begin,
                                    count=(end - begin) // ITEMSIZE[meta["dtype"]])
            tensors[tensor] = (meta["dtype"], flat.view(rows, -1))
    return tensors


def load(plan, model_dir):
    """Allocate and fill every parameter of every rank; returns {(rank, name): tensor}."""
    return assemble(plan, open_sources(model_dir))


def assemble(plan, sources):
    """Every parameter of every rank from sources {tensor name: (dtype name, 2-D tensor)}: also how
    bench/peers_load.py checks the tensors another loader hands out against shardload's checksums."""
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
                pitch = piece.get("dst_pitch", c1 - c0)  # a column block of an input-major tensor (GPTQ)
                dst = flat.as_strided((r1 - r0, c1 - c0), (pitch, 1), start)
                dst.copy_(src.narrow(0, r0, r1 - r0).narrow(1, c0, c1 - c0))
            params[(rank["rank"], param["name"])] = tensor
    return params


def main():
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore", category=UserWarning)  # frombuffer's note on shared memory
    run(__doc__.splitlines()[0], "torch_load", load, lambda t: (t.data_ptr(), t.numel() * t.element_size()))


if __name__ == "__main__":
    main()
