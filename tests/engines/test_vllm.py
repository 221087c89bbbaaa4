"""vLLM 0.33 against shardload, rank by rank (engines.py): its load_format="sharded_state" takes
`shardload export --engine vllm`, and `--load-format shardload` (shardload.vllm) fills its model from the
checkpoint and from the weight server, each holding what vLLM's own loader holds from the checkpoint; then a
live model is synced in place after the server's update and rebalance, equal to vLLM's own reload and EPLB.
Every family shardload exports for vLLM at tp 2 with MoE-TP and with expert parallelism (ep = tp), and at
tp 4 with expert parallelism; static per-tensor FP8, block FP8, llm-compressor's compressed-tensors FP8 and
(per-tensor FP8 compared after vLLM's own FP8 post-processing too; the four-bit and integer formats are
test_vllm_int.py's, a ctest test of its own so that each stays within its time limit); a forward pass on every load's parameters against transformers' (forward_ranks.py; FP8
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
                       MORE + [(a, 2) for a in MOE], sync=True, hub=True))


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
                                             ("qwen3_moe", 4, "ct-fp8-tensor")], sync=True))


def test_vllm_tp2_later_family_synced(tmp_path):
    # One of the later families synced as an RL trainer syncs a live engine (the groups above sync DeepSeek-V3
    # and an FP8 Qwen3-MoE): GLM-4-MoE at tp 2 x ep 2, its router float32 and score bias under the routed
    # experts; the server's update refilled in place, equal to vLLM's reload_weights, then its rebalance,
    # equal to vLLM's own EPLB. A group of its own: the sync goes on with a group's last model.
    print(check_engine(tmp_path, "vllm", 2, [("glm4_moe", 2)], sync=True))
