"""Builds tiny random models of the 2026 families with transformers (its own classes and initialisation) and saves
each with save_pretrained, sharded, all in one interpreter start. Run by transformers 5.25's environment
(scripts/pypi-env.sh tests/producers/requirements-transformers.lock). Arguments: SEED then KIND SRC OUT triples:
  config SRC OUT        the model of make-tiny's config in SRC (random_init.random_model: AutoModelForCausalLM, or
                        AutoModelForImageTextToText for a multimodal class such as Kimi-K2.5's, tower and all)
  config-fused SRC OUT  the same, saved with save_original_format=False: as transformers holds the model, routed
                        experts fused in 3-D tensors (Qwen3.5-MoE's mlp.experts.gate_up_proj [E, 2I, H]), where
                        save_pretrained's default writes them back one expert a tensor
  gemma4 dense|moe OUT  gemma4_random.gemma4_model: Gemma 4 from transformers' own Gemma4TextConfig
Prints transformers' version, the class and OUT, a line each."""
import sys

import torch
import transformers

from gemma4_random import gemma4_model


# make-tiny writes the multimodal classes' configs without their towers' (it writes no tower): transformers' default
# towers are the real ones (Kimi-K2.5's MoonViT, 27 layers of 1152), so these are given a tiny one.
TINY_TOWERS = {"kimi_k25": {"vision_config": dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                                  num_attention_heads=2, pos_emb_height=8, pos_emb_width=8),
                            "projection_hidden_size": 32}}


def random_model(config_dir, seed):
    """transformers' random bf16 model of the config in config_dir, without its quantization_config."""
    config = transformers.AutoConfig.from_pretrained(config_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    for field, value in TINY_TOWERS.get(config.model_type, {}).items():
        setattr(config, field, type(getattr(config, field))(**value) if isinstance(value, dict) else value)
    torch.manual_seed(seed)
    text_only = type(config) in transformers.AutoModelForCausalLM._model_mapping
    auto = transformers.AutoModelForCausalLM if text_only else transformers.AutoModelForImageTextToText
    return auto.from_config(config, dtype=torch.bfloat16)


if __name__ == "__main__":
    seed, args = int(sys.argv[1]), sys.argv[2:]
    for kind, src, out in zip(args[::3], args[1::3], args[2::3]):
        model = gemma4_model(src, seed) if kind == "gemma4" else random_model(src, seed)
        model.save_pretrained(out, max_shard_size="1MB", save_original_format=kind != "config-fused")
        print(transformers.__version__, type(model).__name__, out)
