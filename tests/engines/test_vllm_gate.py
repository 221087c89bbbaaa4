"""vLLM 0.33 against shardload on every path, in `make test` (engines.py check_engine): vLLM's own load ==
its sharded_state load of `export --engine vllm` == `--load-format shardload` from the checkpoint and from the
weight server, then a live model synced in place after the server's update and rebalance, equal to vLLM's own
reload and EPLB; a Hugging Face model id, dense and MoE with expert parallelism, MLA, tp 2 and tp 4 (KV heads
replicated), and one cell of each kind of format (block and per-tensor FP8, packed integers, NVFP4, GPTQ's
input-major words). Every other cell is the matrix's (test_vllm.py, test_vllm_int.py: `make test-matrix`), whose
exports `make test` checks byte for byte against what vLLM last accepted (test_export_digests.py)."""
from engines import check_engine, needs_engines

pytestmark = needs_engines


def test_vllm_gate_tp2(tmp_path):
    # The first, llama, goes by a Hugging Face model id; the last, DeepSeek-V3, is synced and rebalanced.
    print(check_engine(tmp_path, "vllm", 2, [("llama", 1), ("qwen3", 1, "fp8-block"), ("mixtral", 2, "fp8"),
                                             ("qwen3_moe", 2, "ct-w4a16"), ("deepseek_v3", 2, "ct-nvfp4"),
                                             ("llama", 1, "gptq"), ("deepseek_v3", 2)], sync=True, hub=True))


def test_vllm_gate_tp4_fp8_synced_with_eplb(tmp_path):
    # llama's 2 KV heads over 4 ranks; llm-compressor's FP8 Qwen3-MoE synced and rebalanced with vLLM's EPLB on.
    print(check_engine(tmp_path, "vllm", 4, [("llama", 1, "fp8"), ("qwen3_moe", 4, "ct-fp8-tensor")], sync=True))
