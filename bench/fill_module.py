"""One measured fill of a torch module with a rank of a checkpoint (bench/fill_module_bench.sh): the
module's tensors are made and touched first, then the fill runs and the process reports its peak
resident memory above what it held before (VmHWM), and the fill's wall time.
  python3 bench/fill_module.py MODEL MODE TP RANK     (MODE: staged | direct | memcpy | memcpy-fresh)
staged: shardload.load of the rank, then load_state_dict_into (the rank whole in host memory, then
copied: what the engine plugins did before load_into); direct: shardload.load_into (the staging ring
straight into the tensors); memcpy: a copy of the rank's bytes between two touched buffers (the limit);
memcpy-fresh: the same copy into memory allocated for it (its pages faulted in by the copy, as a new
rank buffer's are)."""
import json
import sys
import time

import torch

import shardload


def vm_hwm_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def module_for(params):
    root = torch.nn.Module()
    for p in params:
        *path, leaf = p["name"].split(".")
        node = root
        for part in path:
            if not hasattr(node, part):
                node.add_module(part, torch.nn.Module())
            node = getattr(node, part)
        dtype = torch.uint8 if p["dtype"].startswith("F8_") else shardload.engines.torch_dtype(p["dtype"])
        node.register_parameter(leaf, torch.nn.Parameter(torch.ones(p["shape"], dtype=dtype), requires_grad=False))
    return root


def main():
    model, mode, tp, rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    params = [p for p in shardload.plan(model, tp=tp)["ranks"][rank]["params"] if p["exported"]]
    module = module_for(params)
    rank_bytes = sum(t.numel() * t.element_size() for t in module.parameters())
    scratch = torch.ones(rank_bytes, dtype=torch.uint8) if mode.startswith("memcpy") else None
    before = vm_hwm_bytes()
    start = time.perf_counter()
    if mode == "staged":
        loaded = shardload.load(model, ranks=[rank], tp=tp, threads=2)
        shardload.load_state_dict_into(module, loaded.tensors(rank))
    elif mode == "direct":
        shardload.load_into(module, model, rank=rank, tp=tp, threads=2)
    elif mode == "memcpy-fresh":
        torch.empty(rank_bytes, dtype=torch.uint8).copy_(scratch)
    else:
        offset = 0
        for t in module.parameters():
            flat = t.data.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.data.reshape(-1)
            flat.copy_(scratch[offset:offset + flat.numel()])
            offset += flat.numel()
    seconds = time.perf_counter() - start
    print(json.dumps({"mode": mode, "rank_bytes": rank_bytes, "seconds": seconds,
                      "peak_extra_bytes": vm_hwm_bytes() - before}))


if __name__ == "__main__":
    main()
