"""SGLang 0.5.23 against shardload, rank by rank (engines.py): its load_format="sharded_state" takes
`shardload export --engine sglang`, and shardload.sglang's loader fills its model from the checkpoint and from
the weight server, each holding what SGLang's own loader holds from the checkpoint; then its custom weight
loader syncs a live model in place after the server's update, equal to SGLang's own load of the new
checkpoint. Every family shardload exports for SGLang at tp 2 (expert parallelism 2 for the MoE families; the
dense ones in the same group), and MoE-TP inside EP at tp 4 x ep 2; static per-tensor, block and
llm-compressor's compressed-tensors FP8 through its hooks (an FP8 model synced through SGLang's own
post-processing: shardload.sglang.refill_processed), static per-tensor FP8 through `export --engine sglang
--engine-post-processed` too (SGLang's post-processing run as on an NVIDIA GPU with FP8, where it also checks
the hooks' parameters); a forward pass on every load's parameters. make-tiny's
Qwen3-MoE has a dense first layer, which SGLang's Qwen3-MoE cannot hold: `--engine sglang` refuses it
(tests/python/test_export_engine.py); its checkpoints here have every layer MoE (make-tiny --every-layer-moe),
as real Qwen3-MoE checkpoints do."""
from engines import check_engine, needs_engines

pytestmark = needs_engines
# Static per-tensor FP8 (make-tiny --quant fp8), compared after SGLang's own FP8 post-processing too (and
# exported post-processed for its sharded_state): dense, and MoE with expert parallelism (SGLang's DeepSeek
# per-tensor FP8 is refused: test_export_engine.py); block FP8 DeepSeek-V3 (SGLang's other families leave block
# scales unloaded in its own load: refused).
FP8 = ([(a, 1, "fp8") for a in ["llama", "qwen2", "qwen3"]] + [(a, 2, "fp8") for a in ["mixtral", "qwen2_moe",
                                                                                        "qwen3_moe"]]
       + [("deepseek_v3", 2, "fp8-block")])
# llm-compressor's compressed-tensors FP8 (make-tiny --quant ct-fp8-*): per-tensor, per-channel and block
# weights. SGLang's DeepSeek takes block only (its own load of per-tensor fails on the fused q_a / kv_a
# scale, its post_load_weights of per-channel kv_b_proj on CPU: refused).
COMPRESSED = [("qwen2", 1, "ct-fp8-tensor"), ("qwen2_moe", 2, "ct-fp8-tensor"), ("llama", 1, "ct-fp8-channel"),
              ("qwen3", 1, "ct-fp8-channel"), ("mixtral", 2, "ct-fp8-channel"), ("llama", 1, "ct-fp8-block"),
              ("qwen3_moe", 2, "ct-fp8-block"), ("deepseek_v2", 2, "ct-fp8-block"), ("deepseek_v3", 2, "ct-fp8-block")]


# Of the later families (issue 48's seven, GLM-4.7-Flash and GLM-5), those SGLang builds on CPU and holds as
# layout.md cuts them (the others are refused naming the evidence: docs/engines.md), with expert parallelism.
MORE = [(a, 2) for a in ["minimax_m2", "glm4_moe", "ernie4_5_moe", "glm4_moe_lite"]]


def test_sglang_tp2(tmp_path):
    # The first, llama, goes by a Hugging Face model id (hub=True: from a Hugging Face cache, offline).
    print(check_engine(tmp_path, "sglang", 2, [(a, 1) for a in ["llama", "qwen2", "qwen3"]] + FP8 + COMPRESSED + MORE +
                       [(a, 2) for a in ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"]], sync=True,
                       hub=True))


def test_sglang_tp4_moe_tp_inside_ep(tmp_path):
    # The last, llm-compressor's FP8 Mixtral, is synced: its refill post-processed by SGLang again.
    print(check_engine(tmp_path, "sglang", 4, [("qwen2_moe", 2), ("qwen3_moe", 2), ("deepseek_v3", 2),
                                               ("qwen2_moe", 2, "fp8"), ("mixtral", 2, "ct-fp8-tensor")], sync=True))


def test_sglang_tp2_later_family_synced(tmp_path):
    # One of the later families synced through SGLang's custom weight loader (the groups above sync
    # DeepSeek-V3 and an FP8 Mixtral): GLM-4-MoE at tp 2 x ep 2. A group of its own: the sync goes on with a
    # group's last model.
    print(check_engine(tmp_path, "sglang", 2, [("glm4_moe", 2)], sync=True))


def test_sglang_tp2_int8_and_nvfp4_hooks(tmp_path):
    # llm-compressor's W8A8 int8 and NVFP4 (make-tiny ct-w8a8, ct-nvfp4): SGLang's own load on CPU holds them as
    # loaded as vLLM's does; its hooks, from the checkpoint and from the weight server, fill the same bytes, and
    # SGLang's post-processing of both gives the same. Its sharded_state loader reads them post-processed, which
    # `export --engine sglang` does not write for them (refused: test_export_engine.py).
    print(check_engine(tmp_path, "sglang", 2, [("llama", 1, "ct-w8a8"), ("llama", 1, "ct-nvfp4")]))


def test_sglang_tp2_awq_hooks_in_float16(tmp_path):
    # AWQ (make-tiny awq: GEMM, zero points), which SGLang takes in float16 only: its own load on CPU == its hooks'
    # fill from the checkpoint and from the weight server (scales cast to float16 as SGLang casts them).
    print(check_engine(tmp_path, "sglang", 2, [("llama", 1, "awq")], dtype="float16"))
