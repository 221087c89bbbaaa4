"""Compares two sets of per-rank tensors: a directory of rank-R.safetensors (a rank's state dict, as
vllm_ranks.py and sglang_ranks.py save it) or a shardload export (its shardload.json names each rank's
files). They must have the same names on every rank, each with the same dtype, shape and bytes. Prints each
difference, named (rank, tensor, what differs), or "byte-equal".
  python compare_ranks.py A B [A B ...]"""
import json
import os
import sys

import torch
from safetensors import safe_open


def rank_files(directory):
    """Per rank, its files."""
    manifest = os.path.join(directory, "shardload.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return [[os.path.join(directory, name) for name in entry["files"]] for entry in json.load(f)["ranks"]]
    names = sorted((f for f in os.listdir(directory) if f.startswith("rank-") and f.endswith(".safetensors")),
                   key=lambda f: int(f[len("rank-"):-len(".safetensors")]))
    return [[os.path.join(directory, name)] for name in names]


def rank_tensors(files):
    out = {}
    for path in files:
        with safe_open(path, "pt") as f:
            for key in f.keys():  # noqa: SIM118
                out[key] = f.get_tensor(key)
    return out


def raw(tensor):
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def differences(a_dir, b_dir):
    a_ranks, b_ranks = rank_files(a_dir), rank_files(b_dir)
    if len(a_ranks) != len(b_ranks):
        return [f"{len(a_ranks)} ranks in {a_dir}, {len(b_ranks)} in {b_dir}"]
    out = []
    for rank, (a_files, b_files) in enumerate(zip(a_ranks, b_ranks)):
        a, b = rank_tensors(a_files), rank_tensors(b_files)
        out += [f"rank {rank}: {k} only in {a_dir}" for k in sorted(a.keys() - b.keys())]
        out += [f"rank {rank}: {k} only in {b_dir}" for k in sorted(b.keys() - a.keys())]
        for k in sorted(a.keys() & b.keys()):
            x, y = a[k], b[k]
            if x.dtype != y.dtype or x.shape != y.shape:
                out.append(f"rank {rank}: {k}: {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}")
            elif raw(x) != raw(y):
                out.append(f"rank {rank}: {k}: bytes differ")
    return out


if __name__ == "__main__":
    # Pairs A B, A B, ...: one line per difference, "A B: what", or "A B: byte-equal" (one interpreter and
    # one torch import for all of them).
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: compare_ranks.py A B [A B ...]")
    for a_dir, b_dir in zip(args[::2], args[1::2]):
        diffs = differences(a_dir, b_dir) or ["byte-equal"]
        print("\n".join(f"{a_dir} {b_dir}: {d}" for d in diffs))
