"""vLLM 0.33's load_format="sharded_state" takes `shardload export --engine vllm` and holds what its own
loader holds from the checkpoint, rank by rank (engines.py): every family shardload exports for vLLM, at
tp 2 with MoE-TP and with expert parallelism (ep = tp), and at tp 4 with expert parallelism. So does
`--load-format shardload` (the plugin, shardload.vllm) from the checkpoint and from the weight server,
and a live model it loaded, synced in place after the server's update and rebalance."""
from engines import check_engine_loads_the_export, check_plugin_loads, needs_engines

pytestmark = needs_engines

DENSE = ["llama", "qwen2", "qwen3"]
MOE = ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"]


def test_vllm_tp2(tmp_path):
    check_engine_loads_the_export(tmp_path, "vllm", 2,
                                  [(a, 1) for a in DENSE] + [("qwen3_moe", 1)] + [(a, 2) for a in MOE])


def test_vllm_tp4_expert_parallel(tmp_path):
    check_engine_loads_the_export(tmp_path, "vllm", 4, [("qwen3_moe", 4), ("deepseek_v3", 4)])


def test_vllm_plugin_tp2(tmp_path):
    out = check_plugin_loads(tmp_path, "vllm", 2, [(a, 1) for a in DENSE] + [("qwen3_moe", 1)] +
                             [(a, 2) for a in MOE if a != "qwen3_moe"] + [("qwen3_moe", 2)], sync=True)
    print(out)


def test_vllm_plugin_tp4_expert_parallel(tmp_path):
    print(check_plugin_loads(tmp_path, "vllm", 4, [("deepseek_v3", 4)], sync=True))
