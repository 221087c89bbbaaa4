"""Builds a tiny random DeepSeek-V4 with transformers' own DeepseekV4Config and DeepseekV4ForCausalLM from a
make-tiny config.json (its legacy fields: compress_ratios, num_hash_layers), saves it with save_pretrained, then
rewrites it under DeepSeek's published names, which vLLM 0.33's loader and shardload read (transformers' reverse
renames are anchored at the name's start, so behind its `model.` prefix some stay in its own spelling):
model.layers.N. -> layers.N., model.embed_tokens -> embed, model.norm -> norm, model.hc_head.hc_X -> hc_head_X,
attn.norm -> attn.kv_norm; the hash-routing table tid2eid, which transformers writes int64, as the published
int32. Floating weights are redrawn (normal, std 0.02) so that no two tensors are alike. Arguments: CONFIG_JSON
OUT [SEED]. Run by the producers' environment (scripts/pypi-env.sh); docs/families/deepseek_v4.md has the check
it was used for."""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

config_path, out = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
fields = json.load(open(config_path))
config = transformers.AutoConfig.for_model(
    **{k: v for k, v in fields.items() if k not in ("architectures", "transformers_version")})
config.architectures = ["DeepseekV4ForCausalLM"]
torch.manual_seed(seed)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
with torch.no_grad():
    for p in model.parameters():
        if p.dtype.is_floating_point:
            p.normal_(0, 0.02)
saved = out + ".transformers"
model.save_pretrained(saved)


def published(name):
    for old, new in (("model.hc_head.hc_", "hc_head_"), ("model.embed_tokens.", "embed."), ("model.norm.", "norm."),
                     ("model.layers.", "layers.")):
        if name.startswith(old):
            name = new + name[len(old):]
            break
    return name.replace(".attn.norm.weight", ".attn.kv_norm.weight")


tensors = {}
for file in sorted(f for f in os.listdir(saved) if f.endswith(".safetensors")):
    with safe_open(os.path.join(saved, file), "pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            tensors[published(name)] = t.to(torch.int32) if name.endswith("tid2eid") else t.contiguous()
os.makedirs(out, exist_ok=True)
save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
shutil.copy(config_path, os.path.join(out, "config.json"))
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
    source = os.path.join(os.path.dirname(config_path), name)
    if os.path.exists(source):
        shutil.copy(source, out)
print(transformers.__version__, type(model).__name__, len(tensors), "tensors", out)
