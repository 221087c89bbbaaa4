"""A forward pass on an engine's per-rank parameters, as its tensor-parallel ranks compute it, against the
Hugging Face model's own forward pass (transformers) of the checkpoint.

No engine's CPU build installs from PyPI, so the ranks' computation is written out here, in float32, from each
rank's saved state dict (a directory of rank-R.safetensors, as vllm_ranks.py and sglang_ranks.py save it, in
either engine's names): vocab-parallel embedding and lm_head (rows concatenated over the ranks, the padding
cut), column-parallel q/k/v and gate/up (each rank's own heads and rows), row-parallel o_proj and down_proj
(partial sums added over the ranks), and routed experts (each rank's slots: all experts cut by MoE-TP, or its
own experts whole with expert parallelism; their outputs added over the ranks), shared experts as dense
layers. Families: llama, qwen2 (qkv bias), qwen3 (q/k norms), qwen3_moe (dense layers too), mixtral, qwen2_moe
(a gated shared expert), deepseek_v2 and deepseek_v3 (multi-head latent attention: q_a / kv_a replicated, q_b
and kv_b by heads; grouped sigmoid routing with its score bias; the rotary embedding and yarn's softmax scale
are taken from transformers' own modules, which hold no parameters).

  python forward_ranks.py [--transposed] CHECKPOINT DIR [DIR ...] [-- [--transposed] CHECKPOINT DIR ...]

FP8 weights are dequantized with their scales as the engine holds them before its post-processing or after it
(one scale per fused layer; --transposed: dense FP8 weights held [in, out], as vLLM's post-processing leaves
them); the reference of an FP8 checkpoint is transformers' model of its weights dequantized.

Prints a JSON list, an object per CHECKPOINT: the reference's greedy tokens, and per DIR its greedy tokens
(from the same prompt, N_NEW tokens, the whole sequence recomputed at each step), whether its logits are
bitwise those of the first DIR and of the DIR before it, and their largest difference from the first DIR's
and from the reference's logits, relative to the largest logit of those."""
import json
import os
import re
import sys

import torch
from safetensors import safe_open

PROMPT_TOKENS, N_NEW = 12, 6


def rank_states(directory):
    names = sorted((f for f in os.listdir(directory) if re.fullmatch(r"rank-\d+\.safetensors", f)),
                   key=lambda f: int(f[5:-12]))
    states = []
    for name in names:
        with safe_open(os.path.join(directory, name), "pt") as f:
            # FP8 codes stay codes until Ranks.dequantized reads them with their scales.
            states.append({layout_name(k): f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    return states


def layout_name(name):
    """One spelling for both engines: vLLM keeps the routed experts, the router and Qwen2-MoE's shared
    expert (with its gate) under the fused MoE layer."""
    name = name.replace(".routed_experts.", ".").replace(".experts.gate.", ".gate.")
    name = name.replace(".experts._shared_experts._layer.expert_gate.", ".shared_expert_gate.")
    name = name.replace(".experts._shared_experts._layer.", ".shared_experts.")  # DeepSeek's name, Qwen2-MoE's too
    name = name.replace(".mlp.shared_expert.", ".mlp.shared_experts.")
    # vLLM's MLA modules under mla_attn; SGLang's fused q_a / kv_a projection named after both parts.
    return name.replace(".self_attn.mla_attn.", ".self_attn.").replace("fused_qkv_a_proj_with_mqa", "fused_qkv_a_proj")


def linear(x, weight):
    return x @ weight.T


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, positions, theta):
    """Rotary embedding, halves rotated (the Llama / Qwen convention), on [..., seq, head_dim]."""
    half = x.shape[-1] // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float32) * 2 / x.shape[-1]))
    angles = positions[:, None].float() * inv[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def block_shape(config):
    """The FP8 scale blocks [rows, cols] of config.json's quantization_config (quant_method fp8's
    weight_block_size, or a compressed-tensors group's block_structure); None without blocks."""
    quant = config.get("quantization_config") or {}
    if "config_groups" in quant:
        return next(iter(quant["config_groups"].values()))["weights"].get("block_structure")
    return quant.get("weight_block_size")


def dequantized(codes, scale, parts, block=None):
    """An FP8 weight [rows, cols] (or experts [E, rows, cols]) with its scales as an engine holds them before
    its post-processing: one per tensor, one per fused part (PARTS rows each; the lowest float32 after the
    first: the mark of a layer fused on disk, whose first scale is the whole layer's), one per expert or per
    expert and fused half, one per row, or a block grid."""
    w, scale = codes.float(), scale.float()
    if codes.dim() == 3:
        return torch.stack([dequantized(codes[e], scale[e], [codes.shape[1] // 2] * 2 if scale[e].numel() == 2
                                        else [codes.shape[1]], block) for e in range(codes.shape[0])])
    rows, cols = w.shape
    if scale.dim() == 2 and scale.shape[1] == 1 and scale.shape[0] == rows:  # per row
        return w * scale
    if scale.dim() == 2:  # blocks
        return w * scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    scale = scale.flatten()
    if scale.numel() == 1 or scale[-1] <= -448:
        return w * scale[0]
    return w * torch.cat([scale[i].expand(n) for i, n in enumerate(parts)])[:, None]


class Ranks:
    """The model of config.json computed from the ranks' state dicts."""

    def __init__(self, config, states, reference, transposed=False):
        self.c, self.tp, self.reference, self.transposed = config, len(states), reference, transposed
        self.heads = config["num_attention_heads"]
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.theta = config.get("rope_theta", 10000.0)
        self.vocab = config["vocab_size"]
        self.states = [self.float_state(s) for s in states]

    def float_state(self, state):
        """STATE in float32, its FP8 weights dequantized with their scales (weight_scale, or quant_method
        fp8's block weight_scale_inv)."""
        out = {}
        for name, t in state.items():
            if t.dtype != torch.float8_e4m3fn:
                if not re.search(r"(_scale|_scale_inv|_zero_point)$", name):
                    out[name] = t.float()
                continue
            scale = state.get(name + "_scale", state.get(name + "_scale_inv"))
            if self.transposed and t.dim() == 2:
                t = t.T
            rows = t.shape[-2]
            parts = [rows // 2] * 2
            if name.endswith("qkv_proj.weight"):
                q = self.heads // self.tp * self.head_dim
                parts = [q, (rows - q) // 2, (rows - q) // 2]
            out[name] = dequantized(t, scale, parts, block_shape(self.c))
        return out

    def gathered_rows(self, name):
        return torch.cat([s[name] for s in self.states], 0)[:self.vocab]

    def attention(self, r, i, h, positions):
        s, p = self.states[r], f"model.layers.{i}.self_attn."
        qkv = linear(h, s[p + "qkv_proj.weight"])
        if p + "qkv_proj.bias" in s:
            qkv = qkv + s[p + "qkv_proj.bias"]
        heads = self.heads // self.tp
        kv_heads = (qkv.shape[-1] // self.head_dim - heads) // 2  # the rank's own (or its replicated) KV heads
        q, k, v = qkv.split([heads * self.head_dim, kv_heads * self.head_dim, kv_heads * self.head_dim], -1)
        seq = h.shape[0]
        q = q.view(seq, heads, self.head_dim).transpose(0, 1)
        k = k.view(seq, kv_heads, self.head_dim).transpose(0, 1)
        v = v.view(seq, kv_heads, self.head_dim).transpose(0, 1)
        if p + "q_norm.weight" in s:
            q, k = rms_norm(q, s[p + "q_norm.weight"], self.eps), rms_norm(k, s[p + "k_norm.weight"], self.eps)
        q, k = rotate(q, positions, self.theta), rotate(k, positions, self.theta)
        k = k.repeat_interleave(heads // kv_heads, 0)
        v = v.repeat_interleave(heads // kv_heads, 0)
        scores = (q @ k.transpose(1, 2)) / self.head_dim ** 0.5
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(0, 1).reshape(seq, heads * self.head_dim)
        return linear(out, s[p + "o_proj.weight"])

    def dense_mlp(self, r, prefix, h):
        s = self.states[r]
        gate, up = linear(h, s[prefix + "gate_up_proj.weight"]).chunk(2, -1)
        return linear(torch.nn.functional.silu(gate) * up, s[prefix + "down_proj.weight"])

    def moe(self, i, h, prefix):
        router = self.states[0][prefix + "gate.weight"]
        experts = router.shape[0]
        top, ids = self.route(h @ router.T, self.states[0].get(prefix + "gate.e_score_correction_bias"))
        out = torch.zeros_like(h)
        for r, s in enumerate(self.states):
            w13, w2 = s[prefix + "experts.w13_weight"], s[prefix + "experts.w2_weight"]
            local = w13.shape[0]
            # An EP rank holds a block of experts (MoE-TP inside EP: the ranks of one EP rank hold the same
            # block, each its cut); without EP every rank holds all, cut.
            ep_rank = r // (self.tp // (experts // local))
            for slot in range(local):
                expert = ep_rank * local + slot
                rows = (ids == expert).any(-1)
                if not rows.any():
                    continue
                gate, up = (h[rows] @ w13[slot].T).chunk(2, -1)
                y = (torch.nn.functional.silu(gate) * up) @ w2[slot].T
                out[rows] += y * (top[rows] * (ids[rows] == expert)).sum(-1, keepdim=True)
        if prefix + "shared_experts.gate_up_proj.weight" in self.states[0]:
            shared = sum(self.dense_mlp(r, prefix + "shared_experts.", h) for r in range(self.tp))
            if prefix + "shared_expert_gate.weight" in self.states[0]:  # Qwen2-MoE's is gated
                shared = torch.sigmoid(h @ self.states[0][prefix + "shared_expert_gate.weight"].T) * shared
            out = out + shared
        return out

    def route(self, logits, bias):
        """The top k experts' weights and ids per token, as transformers' routers compute them."""
        k = self.c.get("num_experts_per_tok", 2)
        if not self.c["model_type"].startswith("deepseek"):
            top, ids = logits.softmax(-1).topk(k, -1)
            # Mixtral always renormalizes the top k; the Qwen MoE configs say (transformers' default: no).
            if self.c.get("norm_topk_prob", self.c["model_type"] == "mixtral"):
                top = top / top.sum(-1, keepdim=True)
            return top, ids
        scores = logits.sigmoid() if self.c.get("scoring_func") == "sigmoid" else logits.softmax(-1)
        choice = scores + bias if bias is not None else scores
        groups = self.c.get("n_group") or 1
        if groups > 1:  # DeepSeek-V3: the top groups by their two best experts' scores, then the top k in them
            per_group = choice.view(-1, groups, choice.shape[-1] // groups)
            best = per_group.topk(2, -1)[0].sum(-1).topk(self.c["topk_group"], -1)[1]
            keep = torch.zeros_like(per_group[..., 0]).scatter_(1, best, 1).bool()
            choice = choice.masked_fill(~keep.repeat_interleave(per_group.shape[-1], 1), float("-inf"))
        ids = choice.topk(k, -1)[1]
        top = scores.gather(1, ids)
        if self.c.get("norm_topk_prob"):
            top = top / (top.sum(-1, keepdim=True) + 1e-20)
        return top * self.c.get("routed_scaling_factor", 1.0), ids

    def mla(self, r, i, h, positions):
        """Multi-head latent attention: q_a / kv_a (fused, replicated), q_b and kv_b by heads, o_proj by rows.
        The rotary embedding and the softmax scale (yarn's mscale) are transformers' own modules'."""
        s, p, c = self.states[r], f"model.layers.{i}.self_attn.", self.c
        nope, rope, v_dim, kv_rank = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        if p + "fused_qkv_a_proj.weight" in s:
            q_a, kv_a = linear(h, s[p + "fused_qkv_a_proj.weight"]).split([c["q_lora_rank"], kv_rank + rope], -1)
            q = linear(rms_norm(q_a, s[p + "q_a_layernorm.weight"], self.eps), s[p + "q_b_proj.weight"])
        else:  # DeepSeek-V2-Lite: no q_lora_rank
            q, kv_a = linear(h, s[p + "q_proj.weight"]), linear(h, s[p + "kv_a_proj_with_mqa.weight"])
        seq = h.shape[0]
        q = q.view(seq, -1, nope + rope).transpose(0, 1)[None]
        heads = q.shape[1]
        kv, k_rot = kv_a.split([kv_rank, rope], -1)
        kv = linear(rms_norm(kv, s[p + "kv_a_layernorm.weight"], self.eps), s[p + "kv_b_proj.weight"])
        kv = kv.view(seq, heads, nope + v_dim).transpose(0, 1)[None]
        k_nope, v = kv.split([nope, v_dim], -1)
        q_nope, q_rot = q.split([nope, rope], -1)
        k_rot = k_rot.view(1, 1, seq, rope)
        modeling = sys.modules[type(self.reference).__module__]
        embedding = self.reference.model.rotary_emb(h[None], positions[None])
        if isinstance(embedding, torch.Tensor):  # DeepSeek-V2: complex frequencies
            q_rot, k_rot = modeling.apply_rotary_emb(q_rot, k_rot, embedding)
        else:
            interleaved = getattr(self.reference.config, "rope_interleave", False)
            apply = modeling.apply_rotary_pos_emb_interleave if interleaved else modeling.apply_rotary_pos_emb
            q_rot, k_rot = apply(q_rot, k_rot, *embedding)
        q = torch.cat([q_nope, q_rot], -1)[0]
        k = torch.cat([k_nope, k_rot.expand(-1, heads, -1, -1)], -1)[0]
        scores = (q @ k.transpose(1, 2)) * self.reference.model.layers[i].self_attn.scaling
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v[0]).transpose(0, 1).reshape(seq, heads * v_dim)
        return linear(out, s[p + "o_proj.weight"])

    def logits(self, tokens):
        # Tied embeddings: the engine's state dict keeps the table under lm_head's name only.
        embed = "model.embed_tokens.weight" if "model.embed_tokens.weight" in self.states[0] else "lm_head.weight"
        x = self.gathered_rows(embed)[tokens]
        positions = torch.arange(len(tokens))
        for i in range(self.c["num_hidden_layers"]):
            s0, p = self.states[0], f"model.layers.{i}."
            h = rms_norm(x, s0[p + "input_layernorm.weight"], self.eps)
            attention = self.mla if "kv_lora_rank" in self.c else self.attention
            x = x + sum(attention(r, i, h, positions) for r in range(self.tp))
            h = rms_norm(x, s0[p + "post_attention_layernorm.weight"], self.eps)
            mlp = p + ("block_sparse_moe." if p + "block_sparse_moe.gate.weight" in s0 else "mlp.")
            if mlp + "gate_up_proj.weight" in s0:
                x = x + sum(self.dense_mlp(r, mlp, h) for r in range(self.tp))
            else:
                x = x + self.moe(i, h, mlp)
        x = rms_norm(x, self.states[0]["model.norm.weight"], self.eps)
        head = "lm_head.weight" if "lm_head.weight" in self.states[0] else "model.embed_tokens.weight"
        return x @ self.gathered_rows(head).T


def greedy(logits_of, prompt):
    """The prompt's logits, and N_NEW greedy tokens (the whole sequence recomputed at each step)."""
    tokens, first = list(prompt), None
    for _ in range(N_NEW):
        logits = logits_of(torch.tensor(tokens))
        first = logits if first is None else first
        tokens.append(int(logits[-1].argmax()))
    return first, tokens[len(prompt):]


def dequantized_checkpoint(checkpoint, config, out):
    """An FP8 checkpoint as float32 weights (codes times their scales) in OUT, with its config.json less
    quantization_config: what transformers' own model of it computes on CPU (transformers needs
    accelerate for quant_method fp8, and its compressed-tensors decompression of fused MoE experts fails)."""
    from safetensors.torch import save_file

    tensors = {}
    for name in sorted(os.listdir(checkpoint)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(checkpoint, name), "pt") as f:
                tensors.update({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    weights = {}
    for name, t in tensors.items():
        if t.dtype == torch.float8_e4m3fn:
            scale = tensors.get(name + "_scale", tensors.get(name + "_scale_inv"))
            weights[name] = dequantized(t, scale, [t.shape[0]], block_shape(config))
        elif not re.search(r"\.(weight_scale|weight_scale_inv|input_scale)$", name):
            weights[name] = t.float()
    os.makedirs(out, exist_ok=True)
    save_file(weights, os.path.join(out, "model.safetensors"))
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return out


def check(checkpoint, dirs, transposed):
    import tempfile

    from transformers import AutoModelForCausalLM

    with open(os.path.join(checkpoint, "config.json")) as f:
        config = json.load(f)
    prompt = torch.randint(0, config["vocab_size"], (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as scratch:
        source = (dequantized_checkpoint(checkpoint, config, scratch) if "quantization_config" in config
                  else checkpoint)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    with torch.no_grad():
        reference, reference_tokens = greedy(lambda t: model(t[None]).logits[0], prompt.tolist())
        out = {"checkpoint": checkpoint, "reference_tokens": reference_tokens, "dirs": {}}
        first = previous = None
        for directory in dirs:
            logits, tokens = greedy(Ranks(config, rank_states(directory), model, transposed).logits, prompt.tolist())
            first = logits if first is None else first
            out["dirs"][directory] = {
                "tokens": tokens,
                "bitwise_equal_to_first": bool(torch.equal(logits, first)),
                "bitwise_equal_to_previous": previous is None or bool(torch.equal(logits, previous)),
                "difference_to_first": float((logits - first).abs().max() / first.abs().max()),
                "relative_difference": float((logits - reference).abs().max() / reference.abs().max()),
            }
            previous = logits
    return out


def main():
    torch.set_num_threads(1)
    groups, args = [], sys.argv[1:]
    while args:
        end = args.index("--") if "--" in args else len(args)
        groups.append(args[:end])
        args = args[end + 1:]
    results = []
    for group in groups:
        transposed = group[0] == "--transposed"
        results.append(check(group[transposed], group[transposed + 1:], transposed))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
