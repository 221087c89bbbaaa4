"""Builds a tiny random Gemma 4 multimodal model (Gemma4ForConditionalGeneration: the text model of a Gemma 4
text config directory and a small vision tower) with transformers' own initialisation and saves it with
save_pretrained, sharded: a checkpoint whose text model lives under model.language_model. beside
model.vision_tower. and model.embed_vision., as the Hub's Gemma 4 checkpoints. Arguments: SEED TEXT_CONFIG_DIR
OUT. Run by the producers' environment (scripts/pypi-env.sh)."""
import sys

import torch
import transformers

seed, text_dir, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
text = transformers.AutoConfig.from_pretrained(text_dir)
vision = transformers.Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2, head_dim=16, position_embedding_size=64)
config = transformers.Gemma4Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                   tie_word_embeddings=text.tie_word_embeddings)
config.architectures = ["Gemma4ForConditionalGeneration"]
torch.manual_seed(seed)
model = transformers.Gemma4ForConditionalGeneration(config).to(torch.bfloat16)
model.save_pretrained(out, max_shard_size="256KB")  # sharded, the dense model too
print(transformers.__version__, type(model).__name__, out)
