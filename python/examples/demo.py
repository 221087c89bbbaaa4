"""`make demo`'s Python part: the demo model's tp 4 x ep 2 ranks as torch tensors that share shardload's
memory, and a live model updated in place.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/demo.py build/tiny-qwen3-moe
"""
import sys

import torch

import shardload

model = sys.argv[1]
loaded = shardload.load(model, tp=4, ep=2)
tensors = loaded.tensors(1)
qkv = torch.from_dlpack(tensors["model.layers.0.self_attn.qkv_proj.weight"])
print(f"rank 1 of {len(loaded.ranks)}: {len(tensors)} tensors; qkv_proj {tuple(qkv.shape)} {qkv.dtype}, "
      f"shares shardload's memory: {qkv.data_ptr() == tensors['model.layers.0.self_attn.qkv_proj.weight'].data_ptr}")

live = shardload.LiveModel(model, tp=4, ep=2)
w13 = torch.from_dlpack(live.tensors(0)["model.layers.1.mlp.experts.w13_weight"])
address = w13.data_ptr()
result = live.update_weights(model, filter="mlp.experts")
print(f"update_weights(filter='mlp.experts'): version {result['version']}, {result['updated_tensors']} tensors "
      f"rewritten in place (same address: {w13.data_ptr() == address})")
