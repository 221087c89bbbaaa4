"""Builds tiny random models with Hugging Face transformers (`from_config`, its own initialisation) and saves
each with save_pretrained, sharded: a checkpoint as a fine-tune written by transformers looks.
Arguments: SEED CONFIG_DIR OUT [CONFIG_DIR OUT ...]; the config's quantization_config, if any, is dropped
(the weights are bf16). Run by the producers' environment (scripts/pypi-env.sh)."""
import sys

import torch
import transformers


def random_model(config_dir, seed):
    """transformers' random bf16 model of the config in config_dir, without its quantization_config."""
    config = transformers.AutoConfig.from_pretrained(config_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


if __name__ == "__main__":
    seed, args = int(sys.argv[1]), sys.argv[2:]
    for src, out in zip(args[::2], args[1::2]):
        model = random_model(src, seed)
        model.save_pretrained(out, max_shard_size="1MB")
        print(transformers.__version__, type(model).__name__, out)
