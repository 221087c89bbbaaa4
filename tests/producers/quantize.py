"""Quantizes tiny random models with llm-compressor's `oneshot`, as its FP8 and W4A16 examples do: every Linear
but lm_head and the MoE routers, saved in the compressed-tensors format. Static `FP8` calibrates its input
scales on a handful of random token sequences made here. Arguments: SCHEME SEED CONFIG_DIR OUT, repeated
(SCHEME: FP8_DYNAMIC, FP8_BLOCK, FP8, W4A16, W4A16_ASYM, W8A16, W8A8 or NVFP4 (calibrated as FP8 is); one interpreter start for all). Run by the producers' environment
(scripts/pypi-env.sh)."""
import sys

import torch
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from random_init import random_model

SAMPLES, TOKENS = 4, 32
args = sys.argv[1:]
for scheme, seed, src, out in zip(args[0::4], map(int, args[1::4]), args[2::4], args[3::4]):
    model = random_model(src, seed)
    recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head", "re:.*mlp.gate$"])
    calibration = {}
    if scheme in ("FP8", "NVFP4"):  # static input scales (NVFP4: its activations' global scales)
        tokens = torch.randint(0, model.config.vocab_size, (SAMPLES, TOKENS),
                               generator=torch.Generator().manual_seed(seed))
        calibration = dict(dataset=Dataset.from_dict({"input_ids": tokens.tolist(),
                                                      "attention_mask": torch.ones_like(tokens).tolist()}),
                           num_calibration_samples=SAMPLES, max_seq_length=TOKENS)
    oneshot(model=model, recipe=recipe, **calibration)
    model.save_pretrained(out, max_shard_size="1MB")
    print(scheme, type(model).__name__, out)
