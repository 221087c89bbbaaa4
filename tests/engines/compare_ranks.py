"""Compares two sets of per-rank tensors: a directory of rank-R.safetensors (a rank's state dict, as
vllm_ranks.py and sglang_ranks.py save it) or a shardload export (its shardload.json names each rank's
files). They must have the same names on every rank, each with the same dtype, shape and bytes. Prints each
difference, named (rank, tensor, what differs), or "byte-equal".

A pair given as `--fp8 A B` compares an engine's own FP8 model after its post-processing (A) with the same
engine's model filled by shardload after the same post-processing (B). Two differences are allowed, each
printed as "allowed: " with its reason: FP8 codes one code apart (the engine requantizes fused parts through
float16, shardload in float32: docs/engines.md), and a larger MoE w13_input_scale in B (the engine's loader
keeps the up projection's input scale only, shardload the maximum of gate and up, docs/layout.md).
  python compare_ranks.py [--fp8] A B [[--fp8] A B ...]"""
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


def code_order(tensor):
    """FP8 e4m3 codes as integers in the order of their values (+0 and -0 both 0)."""
    codes = tensor.contiguous().reshape(-1).view(torch.uint8).to(torch.int32)
    magnitude = codes & 0x7F
    return torch.where(codes >= 0x80, -magnitude, magnitude)


def fp8_allowed(k, x, y):
    """Why engine tensor x and shardload's y may differ (--fp8), or None."""
    if x.dtype == torch.float8_e4m3fn:
        apart = (code_order(x) - code_order(y)).abs()
        if apart.max().item() <= 1:
            return (f"{int((apart == 1).sum())} of {apart.numel()} codes one code apart "
                    "(the engine requantizes through float16)")
    if k.endswith("w13_input_scale") and bool((y >= x).all()):
        return "shardload's input scale is at least the engine's (max of gate and up, not up alone)"
    return None


def differences(a_dir, b_dir, fp8=False):
    a_ranks, b_ranks = rank_files(a_dir), rank_files(b_dir)
    if not a_ranks or not b_ranks:  # nothing saved is not "equal"
        return [f"no rank files in {a_dir if not a_ranks else b_dir}"]
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
                reason = fp8_allowed(k, x, y) if fp8 else None
                out.append(f"rank {rank}: {k}: " + (f"allowed: {reason}" if reason else "bytes differ"))
    return out


if __name__ == "__main__":
    # Pairs A B, A B, ...: one line per difference, "A B: what", or "A B: byte-equal" (one interpreter and
    # one torch import for all of them).
    args, pairs = sys.argv[1:], []
    while args:
        fp8 = args[0] == "--fp8"
        args = args[fp8:]
        if len(args) < 2:
            sys.exit("usage: compare_ranks.py [--fp8] A B [[--fp8] A B ...]")
        pairs.append((args[0], args[1], fp8))
        args = args[2:]
    if not pairs:
        sys.exit("usage: compare_ranks.py [--fp8] A B [[--fp8] A B ...]")
    for a_dir, b_dir, fp8 in pairs:
        diffs = differences(a_dir, b_dir, fp8) or ["byte-equal"]
        print("\n".join(f"{a_dir} {b_dir}: {d}" for d in diffs))
