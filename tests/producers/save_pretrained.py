"""Loads checkpoints with Hugging Face transformers and writes each again with save_pretrained (sharded): a
checkpoint as transformers writes it. Arguments: SRC OUT [SRC OUT ...] (one interpreter start for all).
Run by the producers' environment (scripts/pypi-env.sh)."""
import sys

import torch
import transformers

args = sys.argv[1:]
for src, out in zip(args[::2], args[1::2]):
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    model.save_pretrained(out, max_shard_size="1MB")
    print(transformers.__version__, type(model).__name__, out)
