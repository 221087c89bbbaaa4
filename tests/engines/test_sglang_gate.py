"""SGLang 0.5.23 against shardload on every path, in `make test` (engines.py check_engine): SGLang's own load
== its sharded_state load of `export --engine sglang` (FP8 post-processed as on an NVIDIA GPU) == shardload.sglang's
loader from the checkpoint and from the weight server, then a live model synced in place through its custom
weight loader; a Hugging Face model id, dense and MoE with expert parallelism, MLA, MoE-TP inside EP at tp 4,
FP8 through its post-processing and W8A8 int8 through its hooks. Every other cell is the matrix's
(test_sglang.py: `make test-matrix`), whose exports `make test` checks byte for byte against what SGLang last
accepted (test_export_digests.py)."""
from engines import check_engine, needs_engines

pytestmark = needs_engines


def test_sglang_gate_tp2(tmp_path):
    # The first, llama, goes by a Hugging Face model id; the last, DeepSeek-V3, is synced (its MLA w_kc / w_vc).
    print(check_engine(tmp_path, "sglang", 2, [("llama", 1), ("llama", 1, "fp8"), ("qwen3_moe", 2, "ct-fp8-block"),
                                               ("llama", 1, "ct-w8a8"), ("deepseek_v3", 2)], sync=True, hub=True))


def test_sglang_gate_tp4_moe_tp_inside_ep(tmp_path):
    # llm-compressor's FP8 Mixtral synced: its refill post-processed by SGLang again.
    print(check_engine(tmp_path, "sglang", 4, [("qwen2_moe", 2), ("mixtral", 2, "ct-fp8-tensor")], sync=True))
