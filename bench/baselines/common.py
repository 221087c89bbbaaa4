"""What the NumPy and PyTorch baselines share: finding the shard headers, the timed run, and the
byte-for-byte check against `shardload load --checksum`."""
import argparse
import ctypes
import json
import os
import struct
import sys
import time


def shard_headers(model_dir):
    """Yield (path, header dict, file offset of the data section) for each safetensors file."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for name in files:
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            header_len = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(header_len))
        header.pop("__metadata__", None)
        yield path, header, 8 + header_len


def verify(params, checksum_path, tool, address_and_size):
    """Compare each parameter's XXH3-64 with shardload's --checksum lines; exit 1 on a mismatch.
    address_and_size(param) gives the parameter's buffer address and byte count."""
    xxh3 = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
    xxh3.restype, xxh3.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_size_t]
    expected = {}
    with open(checksum_path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5:  # rank, name, dtype, shape, hash; skips the summary line
                expected[(int(fields[0]), fields[1])] = int(fields[4], 16)
    bad = [key for key, p in params.items() if xxh3(*address_and_size(p)) != expected.get(key)]
    if bad or len(expected) != len(params):
        sys.exit(f"{tool}: {len(bad)} of {len(params)} parameters differ from shardload "
                 f"({len(expected)} checksums), first: {bad[:3]}")
    print(f"{tool}: verified {len(params)} parameters against shardload", file=sys.stderr)


def run(description, tool, load, address_and_size):
    """The command line of a baseline: PLAN_JSON MODEL_DIR [--verify CHECKSUMS]. Times load(plan,
    model_dir) and prints "<seconds> <param bytes> <cpu seconds>"."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("plan")
    parser.add_argument("model")
    parser.add_argument("--verify")
    args = parser.parse_args()
    with open(args.plan) as f:
        plan = json.load(f)
    cpu0, start = os.times(), time.perf_counter()
    params = load(plan, args.model)
    seconds, cpu1 = time.perf_counter() - start, os.times()
    nbytes = sum(address_and_size(p)[1] for p in params.values())
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(f"{seconds:.4f} {nbytes} {cpu:.3f}", flush=True)
    if args.verify:
        verify(params, args.verify, tool, address_and_size)
