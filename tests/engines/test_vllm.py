"""vLLM 0.33 against shardload, rank by rank (engines.py): its load_format="sharded_state" takes
`shardload export --engine vllm`, and `--load-format shardload` (shardload.vllm) fills its model from the
checkpoint and from the weight server, each holding what vLLM's own loader holds from the checkpoint; then a
live model is synced in place after the server's update and rebalance, equal to vLLM's own reload and EPLB.
Every family shardload exports for vLLM at tp 2 with MoE-TP and with expert parallelism (ep = tp), and at
tp 4 with expert parallelism; static per-tensor FP8, block FP8, llm-compressor's compressed-tensors FP8 and
its packed integer weights (W4A16, W8A16) at both (per-tensor FP8 compared after vLLM's own FP8
post-processing too); a forward pass on every load's parameters against transformers' (forward_ranks.py; FP8
and unquantized loads)."""
from engines import check_engine, needs_engines

pytestmark = needs_engines

DENSE = ["llama", "qwen2", "qwen3"]
# The last is synced (and rebalanced): DeepSeek-V3, whose MLA tensors vLLM derives again from kv_b_proj.
MOE = ["mixtral", "qwen2_moe", "deepseek_v2", "qwen3_moe", "deepseek_v3"]
# Static per-tensor FP8 (make-tiny --quant fp8: AutoFP8's format, routers unquantized and listed) and block
# FP8 (DeepSeek-V3's format) for every family, dense, with MoE-TP and with expert parallelism.
FP8 = ([(a, 1, "fp8") for a in DENSE] + [("qwen3_moe", 1, "fp8")] + [(a, 2, "fp8") for a in MOE] +
       [(a, 1, "fp8-block") for a in DENSE] + [("qwen3_moe", 1, "fp8-block")] +
       [(a, 2, "fp8-block") for a in ["mixtral", "qwen2_moe", "deepseek_v3"]])
# llm-compressor's compressed-tensors FP8 (make-tiny --quant ct-fp8-*: its names, BF16 scales, one input scale
# per input as its observers give): per-tensor, per-channel and block weights, dense, MoE-TP and EP, every
# family in one of them at least.
COMPRESSED = ([("llama", 1, "ct-fp8-tensor"), ("qwen2", 1, "ct-fp8-channel"), ("qwen3", 1, "ct-fp8-block"),
               ("qwen3_moe", 1, "ct-fp8-tensor"), ("deepseek_v3", 2, "ct-fp8-tensor"), ("mixtral", 2, "ct-fp8-tensor"),
               ("qwen2_moe", 2, "ct-fp8-tensor"), ("qwen3_moe", 2, "ct-fp8-channel"), ("qwen3_moe", 1, "ct-fp8-block"),
               ("deepseek_v2", 2, "ct-fp8-block"), ("deepseek_v3", 2, "ct-fp8-block")])

# llm-compressor's packed integer weights (make-tiny --quant ct-w4a16 / ct-w4a16-asym: int4 in 32-value groups,
# symmetric or with zero points; ct-w8a16: int8 per channel), held as vLLM's CompressedTensorsWNA16 and its
# MoE method hold them: dense, MoE with EP and with MoE-TP, MLA.
PACKED = [("llama", 1, "ct-w4a16"), ("qwen3", 1, "ct-w4a16-asym"), ("qwen3_moe", 2, "ct-w4a16"),
          ("qwen3_moe", 1, "ct-w4a16-asym"), ("mixtral", 2, "ct-w8a16"), ("qwen2_moe", 1, "ct-w4a16"),
          ("deepseek_v3", 2, "ct-w4a16"), ("deepseek_v2", 1, "ct-w8a16"),
          # Kimi-K2.5 as the Hub ships it: int4 routed experts (int32 weight_shape), the rest bf16, the text model
          # under language_model. (vLLM built without its vision tower: vllm_ranks.py's TOWERLESS).
          ("kimi_k25", 2, "ct-w4a16")]
# llm-compressor's W8A8 int8 (make-tiny --quant ct-w8a8: int8 weights, a scale per row, activations quantized
# per token at run time), held as vLLM's CompressedTensorsW8A8Int8 and its MoE method hold them.
INT8 = [("llama", 1, "ct-w8a8"), ("qwen3_moe", 2, "ct-w8a8"), ("deepseek_v3", 1, "ct-w8a8")]
# llm-compressor's NVFP4 (make-tiny --quant ct-nvfp4: FP4 weights, FP8 scales per 16 inputs, each part's global
# scales side by side), held as vLLM's CompressedTensorsW4A4Fp4 and its MoE method hold them.
NVFP4 = [("llama", 1, "ct-nvfp4"), ("qwen3_moe", 2, "ct-nvfp4"), ("deepseek_v3", 2, "ct-nvfp4")]
# NVIDIA ModelOpt's NVFP4 (make-tiny --quant modelopt-nvfp4: the same bytes and group scales as `weight`, each
# projection's weight_scale_2 and input_scale side by side), held as vLLM's ModelOptNvFp4LinearMethod and
# ModelOptNvFp4FusedMoE hold them.
MODELOPT = [("llama", 1, "modelopt-nvfp4"), ("qwen3_moe", 2, "modelopt-nvfp4"), ("deepseek_v3", 2, "modelopt-nvfp4")]
# GPTQ int4 (make-tiny --quant gptq: 32-value groups, symmetric, input-major qweight [K/8, N]; gptq-channel: one
# group a column), held as vLLM's AutoGPTQ methods hold them: dense, MoE with EP, MLA with MoE-TP. Qwen3-MoE
# with every layer MoE (engines.py VARIANTS says why).
# Qwen3.5-MoE too (issue 49's GPTQ-Int4: its linear attention's in_proj_qkv cut into q/k/v column ranges).
GPTQ = [("llama", 1, "gptq"), ("qwen3_moe-every-layer-moe", 2, "gptq"), ("deepseek_v3", 1, "gptq"),
        ("qwen3_5_moe", 2, "gptq")]
# AWQ int4 (make-tiny --quant awq: GEMM, zero points, 32-value groups, input-major qweight [K, N/8] packed along
# N), held as vLLM's AWQ methods hold them.
AWQ = [("llama", 1, "awq"), ("qwen3_moe", 2, "awq"), ("deepseek_v3", 1, "awq")]


# The families vLLM builds on CPU with the harness's stand-ins for a kernel choice (vllm_ranks.py:
# cpu_model_stand_ins), each with expert parallelism; gpt-oss also with its experts in MXFP4 as the Hub
# ships them; DeepSeek-V4 in bf16 and as the Hub ships it (make-tiny --quant mxfp4: block FP8 with ue8m0
# scales, MXFP4 experts), with expert parallelism and with MoE-TP.
MORE = [(a, 2) for a in ["gpt_oss", "qwen3_next", "llama4", "minimax_m2", "deepseek_v32", "glm4_moe",
                         "ernie4_5_moe", "glm4_moe_lite", "glm_moe_dsa", "qwen3_5_moe"]] + \
    [("gpt_oss", 2, "mxfp4"), ("qwen3_5", 1), ("gemma4", 2), ("gemma4-dense", 1)] + \
    [("qwen3_5", 1, "fp8-block"), ("qwen3_5_moe", 2, "fp8-block")] + \
    [("deepseek_v4", 2), ("deepseek_v4", 2, "mxfp4"), ("deepseek_v4", 1, "mxfp4")]


def test_vllm_tp2(tmp_path):
    # The first, llama, goes by a Hugging Face model id (hub=True: from a Hugging Face cache, offline).
    print(check_engine(tmp_path, "vllm", 2, [(a, 1) for a in DENSE] + [("qwen3_moe", 1)] + FP8 + COMPRESSED +
                       PACKED + INT8 + NVFP4 + MODELOPT + GPTQ + AWQ + MORE + [(a, 2) for a in MOE], sync=True, hub=True))


def test_vllm_tp4_expert_parallel(tmp_path):
    # llama's 2 KV heads over 4 ranks: its FP8 qkv scales with the KV heads replicated. The last,
    # llm-compressor's FP8 Qwen3-MoE, runs with vLLM's EPLB on: synced after the server's update, then
    # rebalanced against vLLM's own EPLB (engines.py: fp8_eplb).
    # Three of the later families at ep 4 too: Qwen3-Next's linear-attention heads, V3.2's indexer and
    # Llama-4's chunked attention and shared experts cut four ways (vLLM's gpt-oss divides its KV heads
    # by tp without replicating them: make-tiny's 2 heads at tp 4 are refused, test_export_engine.py).
    print(check_engine(tmp_path, "vllm", 4, [("llama", 1, "fp8"), ("qwen3_moe", 4), ("deepseek_v3", 4),
                                             ("qwen3_next", 4), ("deepseek_v32", 4), ("llama4", 4),
                                             ("deepseek_v3", 4, "fp8-block"), ("qwen3_moe", 4, "fp8"),
                                             ("llama", 1, "ct-fp8-channel"), ("deepseek_v3", 4, "ct-fp8-block"),
                                             ("llama", 1, "ct-w4a16-asym"), ("qwen3_moe", 4, "ct-w4a16"),
                                             ("deepseek_v3", 4, "ct-w8a16"), ("deepseek_v3", 4, "ct-w8a8"),
                                             ("llama", 1, "ct-w8a8"), ("qwen3_moe", 4, "ct-w8a8"),
                                             ("llama", 1, "ct-nvfp4"), ("qwen3_moe", 4, "ct-nvfp4"),
                                             ("deepseek_v3", 4, "ct-nvfp4"), ("llama", 1, "modelopt-nvfp4"),
                                             ("qwen3_moe", 4, "modelopt-nvfp4"), ("deepseek_v3", 4, "modelopt-nvfp4"),
                                             ("llama", 1, "gptq"),
                                             ("qwen3_moe-every-layer-moe", 4, "gptq"),
                                             ("deepseek_v3", 4, "gptq-channel"), ("qwen3_moe", 4, "awq"),
                                             ("qwen3_moe", 4, "ct-fp8-tensor")], sync=True))


def test_vllm_tp2_later_family_synced(tmp_path):
    # One of the later families synced as an RL trainer syncs a live engine (the groups above sync DeepSeek-V3
    # and an FP8 Qwen3-MoE): GLM-4-MoE at tp 2 x ep 2, its router float32 and score bias under the routed
    # experts; the server's update refilled in place, equal to vLLM's reload_weights, then its rebalance,
    # equal to vLLM's own EPLB. A group of its own: the sync goes on with a group's last model.
    print(check_engine(tmp_path, "vllm", 2, [("glm4_moe", 2)], sync=True))
