"""Builds a tiny random Llama-4 multimodal model (Llama4ForConditionalGeneration: the text model of make-tiny's
llama4 config and a small vision tower) with transformers' own initialisation and saves it with save_pretrained,
sharded: a checkpoint whose text model lives under language_model. beside vision_model and the projector.
Arguments: SEED TEXT_CONFIG_DIR OUT. Run by the producers' environment (scripts/pypi-env.sh)."""
import sys

import torch
import transformers

seed, text_dir, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
text = transformers.AutoConfig.from_pretrained(text_dir)
vision = transformers.Llama4VisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, image_size=56, patch_size=14,
                                         vision_output_dim=128, projector_input_dim=128, projector_output_dim=128)
config = transformers.Llama4Config(text_config=text.to_dict(), vision_config=vision.to_dict())
config.architectures = ["Llama4ForConditionalGeneration"]
torch.manual_seed(seed)
model = transformers.Llama4ForConditionalGeneration(config).to(torch.bfloat16)
model.save_pretrained(out, max_shard_size="1MB")
print(transformers.__version__, type(model).__name__, out)
