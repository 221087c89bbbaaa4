"""shardload.iter_weights: every checkpoint tensor, unsharded, as (name, torch tensor), the stream the
engines' load_weights(weights) consumes.

    iter_weights_load.py MODEL_DIR

Timed: iterating the whole checkpoint (each file read into one buffer by shardload's parallel pread).
Prints "<seconds> <tensor bytes> <cpu seconds> <tensors>".
"""
import os
import sys
import time

import torch

import shardload


def main():
    model = sys.argv[1]
    torch.set_num_threads(2)
    cpu0, start = os.times(), time.perf_counter()
    nbytes = count = 0
    for _, tensor in shardload.iter_weights(model, threads=2):
        nbytes += tensor.numel() * tensor.element_size()
        count += 1
    seconds, cpu1 = time.perf_counter() - start, os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(f"{seconds:.4f} {nbytes} {cpu:.3f} {count}", flush=True)


if __name__ == "__main__":
    main()
