"""Builds a tiny random Qwen3.5 multimodal model (Qwen3_5ForConditionalGeneration or its MoE class: the text model
of make-tiny's qwen3_5 or qwen3_5_moe config and a small vision tower) with transformers' own initialisation and
saves it with save_pretrained, sharded: a checkpoint whose text model lives under model.language_model. beside
model.visual., with lm_head outside both. Arguments: SEED TEXT_CONFIG_DIR OUT. Run by the producers' environment
(scripts/pypi-env.sh)."""
import sys

import torch
import transformers

seed, text_dir, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
text = transformers.AutoConfig.from_pretrained(text_dir)
moe = text.model_type == "qwen3_5_moe_text"
vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text.hidden_size)
config_class = transformers.Qwen3_5MoeConfig if moe else transformers.Qwen3_5Config
config = config_class(text_config=text.to_dict(), vision_config=vision, tie_word_embeddings=text.tie_word_embeddings)
config.architectures = ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"]
torch.manual_seed(seed)
model_class = (transformers.Qwen3_5MoeForConditionalGeneration if moe else
               transformers.Qwen3_5ForConditionalGeneration)
model = model_class(config).to(torch.bfloat16)
model.save_pretrained(out, max_shard_size="1MB")
print(transformers.__version__, type(model).__name__, out)
