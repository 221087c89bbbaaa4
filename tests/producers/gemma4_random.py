"""Builds tiny random Gemma 4 text models with transformers' own Gemma4TextConfig and Gemma4ForCausalLM (not
make-tiny's config): sliding layers of head size 16 and 2 KV heads, full-attention layers (2 and 5) of 32 with
one KV head and K reused as V, the last two layers on shared KV caches with a double-wide MLP, per-layer
embeddings of 8; "moe" adds the MoE block (8 experts, top 2). Saved with save_pretrained, sharded (transformers
writes the full layers' geometry as per_layer_config). Arguments: SEED dense|moe OUT [dense|moe OUT ...]. Run by
the producers' environment (scripts/pypi-env.sh)."""
import sys

import torch
import transformers

def gemma4_model(kind, seed):
    """transformers' random bf16 Gemma4ForCausalLM of KIND (dense or moe), from its own config."""
    fields = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                  num_global_key_value_heads=1, attention_k_eq_v=True,
                  layer_types=["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention"] * 2 +
                  ["full_attention"],
                  num_kv_shared_layers=2, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
                  vocab_size_per_layer_input=256, max_position_embeddings=4096, sliding_window=64, pad_token_id=0)
    if kind == "moe":
        fields.update(enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=64)
    config = transformers.Gemma4TextConfig(**fields)
    config.architectures = ["Gemma4ForCausalLM"]
    torch.manual_seed(seed)
    return transformers.Gemma4ForCausalLM(config).to(torch.bfloat16)


if __name__ == "__main__":
    seed, args = int(sys.argv[1]), sys.argv[2:]
    for kind, out in zip(args[::2], args[1::2]):
        model = gemma4_model(kind, seed)
        model.save_pretrained(out, max_shard_size="1MB")
        print(transformers.__version__, type(model).__name__, out)
