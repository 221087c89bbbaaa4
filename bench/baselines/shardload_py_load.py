"""shardload through Python: the plan's layout loaded by shardload.load and every parameter taken as a
torch tensor with torch.from_dlpack (no copy), the way an engine would use the package.

    shardload_py_load.py PLAN_JSON MODEL_DIR [--verify CHECKSUMS]

Timed: the load and taking every tensor. Prints "<seconds> <param bytes> <cpu seconds>" like the other
baselines. With $SHARDLOAD_BENCH_OVERHEAD set to a file, also writes there "<seconds> <tensors>" of
taking the tensors alone (the Python cost per tensor on top of the load).
"""
import os
import time

import torch

import shardload
from common import run


def load(plan, model_dir):
    layout = {"tp": plan["tp_size"], "ep": plan["ep_size"], "dp": plan.get("dp_size", 1),
              "dp_style": plan.get("dp_style", "sglang")}
    loaded = shardload.load(model_dir, threads=2, **layout)
    start = time.perf_counter()
    params = {}
    for rank in loaded.ranks:
        for name, tensor in loaded.tensors(rank, internal=True).items():
            params[(rank, name)] = torch.from_dlpack(tensor)
    seconds = time.perf_counter() - start
    overhead = os.environ.get("SHARDLOAD_BENCH_OVERHEAD")
    if overhead:
        with open(overhead, "w") as f:
            f.write(f"{seconds:.6f} {len(params)}\n")
    return params  # the tensors keep shardload's buffers alive


def address_and_size(t):
    return t.data_ptr(), t.numel() * t.element_size()


if __name__ == "__main__":
    torch.set_num_threads(2)
    run(__doc__, "shardload_py", load, address_and_size)
