"""vLLM 0.33 against shardload on the four-bit and integer formats (issue 47; docs/engines.md "The four-bit and
integer formats, cell by cell"), rank by rank as test_vllm.py does (engines.py): vLLM's own load of the checkpoint
== its sharded_state load of `export --engine vllm` == `--load-format shardload` from the checkpoint == from the
weight server, at tp 2 (dense, MoE with EP and with MoE-TP, MLA) and at tp 4 with expert parallelism. A file of its
own (one ctest test each): with test_vllm.py's groups it would pass ctest's time limit on a loaded 2-core machine."""
from engines import check_engine, needs_engines

pytestmark = needs_engines

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


def test_vllm_tp2_integer_formats(tmp_path):
    print(check_engine(tmp_path, "vllm", 2, PACKED + INT8 + NVFP4 + MODELOPT + GPTQ + AWQ))


def test_vllm_tp4_integer_formats_expert_parallel(tmp_path):
    print(check_engine(tmp_path, "vllm", 4, [("llama", 1, "ct-w4a16-asym"), ("qwen3_moe", 4, "ct-w4a16"),
                                             ("deepseek_v3", 4, "ct-w8a16"), ("deepseek_v3", 4, "ct-w8a8"),
                                             ("llama", 1, "ct-w8a8"), ("qwen3_moe", 4, "ct-w8a8"),
                                             ("llama", 1, "ct-nvfp4"), ("qwen3_moe", 4, "ct-nvfp4"),
                                             ("deepseek_v3", 4, "ct-nvfp4"), ("llama", 1, "modelopt-nvfp4"),
                                             ("qwen3_moe", 4, "modelopt-nvfp4"), ("deepseek_v3", 4, "modelopt-nvfp4"),
                                             ("llama", 1, "gptq"), ("qwen3_moe-every-layer-moe", 4, "gptq"),
                                             ("deepseek_v3", 4, "gptq-channel"), ("qwen3_moe", 4, "awq")]))
