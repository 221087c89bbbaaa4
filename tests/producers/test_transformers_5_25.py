"""transformers 5.25 as a producer of the 2026 families (issue 49): tiny random models of Qwen3.5 (dense and MoE,
the MoE's experts also as transformers holds them, fused in 3-D tensors), GLM-4.7-Flash, GLM-5, Gemma 4 (dense and
MoE) and Kimi-K2.5 saved with its save_pretrained (random_2026.py, in transformers 5.25's own environment:
llm-compressor pins the producers' environment to transformers 5.17). Each plans, exports at tp 2 (MoE: ep 2) and
verifies; then the independent check: vLLM 0.33 (the engines' environment, another interpreter) loads each
transformers-written checkpoint with its own loader and `shardload export --engine vllm` of it with its
sharded_state loader, and the two hold the same bytes on every rank (tests/engines/engines.py check_engine, with
the hooks beside them)."""
import json
import os
import sys

import pytest
import shardload
import torch
from shardload.verify import main as verify

from producers import HERE, cli, producer

TRANSFORMERS = os.environ.get("SHARDLOAD_TRANSFORMERS_PYTHON", "")
pytestmark = pytest.mark.skipif(not TRANSFORMERS or not os.access(TRANSFORMERS, os.X_OK),
                                reason="no transformers 5.25 environment (scripts/pypi-env.sh "
                                       "tests/producers/requirements-transformers.lock could not make it)")

# case: (random_2026.py's kind, its source: a make-tiny family whose config transformers builds, or Gemma 4's
# dense|moe, made from transformers' own config; expert parallelism at tp 2).
CASES = {
    "qwen3_5": ("config", "qwen3_5", 1),
    "qwen3_5_moe": ("config", "qwen3_5_moe", 2),
    # The same model as transformers holds it: experts fused, mlp.experts.gate_up_proj [E, 2I, H] and down_proj
    # [E, H, I] (save_original_format=False; the default save writes them one expert a tensor).
    "qwen3_5_moe-fused": ("config-fused", "qwen3_5_moe", 2),
    "glm4_moe_lite": ("config", "glm4_moe_lite", 2),
    "glm_moe_dsa": ("config", "glm_moe_dsa", 2),
    "gemma4-dense": ("gemma4", "dense", 1),
    "gemma4-moe": ("gemma4", "moe", 2),
    "kimi_k25": ("config", "kimi_k25", 2),
    # DeepSeek-V4: transformers 5.25's own DeepseekV4ForCausalLM of make-tiny's config, saved by save_pretrained,
    # then renamed to DeepSeek's published names, which vLLM 0.33's loader and shardload read (transformers' save
    # does not restore them: model.-prefixed names, hc_head.hc_*, attn.norm, an int64 tid2eid):
    # deepseek_v4_published_names.py, run by transformers 5.25's environment.
    "deepseek_v4": ("published-v4", "deepseek_v4", 2),
}
WAITING = {}


# Where transformers 5.25's save is not what the Hub ships, the checkpoint is made so (the Hub's is what shardload and
# vLLM read): Kimi-K2.5's config names transformers' class (Kimi_K25ForConditionalGeneration, the Hub's
# KimiK25ForConditionalGeneration: unknown to vLLM 0.33 and shardload), and its save names the text layers
# language_model.model.blocks.N (the reverse of its vision tower's blocks.N -> layers.N renaming, unanchored, also
# turns the text model's layers.N into blocks.N; the Hub's are language_model.model.layers.N) and the projector's
# norm model.mm_projector.pre_norm (the Hub's mm_projector.pre_norm, beside mm_projector.proj: vLLM 0.33 refuses
# "There is no module or parameter named 'model' in KimiK25ForConditionalGeneration").
PUBLISHED = {"kimi_k25": ({"architectures": ["KimiK25ForConditionalGeneration"]},
                          [r"^language_model\.model\.blocks\.", "language_model.model.layers.",
                           r"^model\.mm_projector\.", "mm_projector."])}


def published_names(case, model):
    """The checkpoint of CASE made what the Hub ships (PUBLISHED); returns the number of tensors renamed."""
    fields, renames = PUBLISHED.get(case, ({}, []))
    if fields:
        path = model / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=2) + "\n")
    return int(producer("rename_tensors.py", model, *renames, python=TRANSFORMERS)) if renames else 0


def tensor_names(model):
    """The checkpoint's tensor names: its index's, or its one file's header's."""
    index = model / "model.safetensors.index.json"
    if index.exists():
        return set(json.loads(index.read_text())["weight_map"])
    with open(model / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return set(header) - {"__metadata__"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """{case: the checkpoint transformers 5.25 wrote}, all made by one interpreter start."""
    root = tmp_path_factory.mktemp("tf525")
    args, models = [], {}
    for case, (kind, source, _) in CASES.items():
        if kind != "gemma4":
            config = root / f"config-{case}"
            cli("make-tiny", "--arch", source, "--out", config)  # its config.json: transformers builds the weights
            source = config
        models[case] = root / case
        if kind == "published-v4":
            # One shared expert, as DeepSeek-V4-Flash has: transformers 5.25 sizes its shared MLP by
            # intermediate_size alone, vLLM and shardload by moe_intermediate_size * n_shared_experts (make-tiny
            # writes 2 and another intermediate_size).
            fields = json.loads((source / "config.json").read_text())
            fields.update(n_shared_experts=1, intermediate_size=fields["moe_intermediate_size"])
            (source / "config.json").write_text(json.dumps(fields, indent=2) + "\n")
            out = producer("deepseek_v4_published_names.py", source / "config.json", models[case], 3,
                           python=TRANSFORMERS)
            assert out.startswith("5.25.0 DeepseekV4ForCausalLM"), out
            continue
        args += [kind, source, models[case]]
    producer("random_2026.py", 3, *args, python=TRANSFORMERS)
    for case, model in models.items():
        renamed = published_names(case, model)
        assert renamed > 0 or case not in PUBLISHED or not PUBLISHED[case][1], f"{case}: nothing to rename"
    return models


def layout(case, tp=2):
    ep = CASES[case][2]
    return ["--tp", str(tp)] + (["--ep", str(ep)] if ep > 1 else [])


@pytest.fixture(scope="module")
def exported(written, tmp_path_factory):
    """{case: its checkpoint exported at tp 2 (MoE: ep 2)}."""
    root = tmp_path_factory.mktemp("exports")
    for case, model in written.items():
        cli("export", model, *layout(case), "--out", root / case)
    return {case: root / case for case in written}


@pytest.mark.parametrize("case", [*CASES, *(pytest.param(c, marks=pytest.mark.skip(reason=r))
                                            for c, r in WAITING.items())])
def test_transformers_5_25_checkpoint_plans_exports_and_verifies(written, exported, case):
    model = written[case]
    config = json.loads((model / "config.json").read_text())
    assert config.get("transformers_version") == "5.25.0" or CASES[case][0] == "published-v4"
    names = tensor_names(model)
    fused = [n for n in names if n.endswith("mlp.experts.gate_up_proj")]
    if case == "qwen3_5_moe-fused":
        assert fused and not any(".experts.0." in n for n in names), "the experts fused, as transformers holds them"
    elif case.startswith("qwen3_5_moe"):
        assert not fused and any(".mlp.experts.0.gate_proj.weight" in n for n in names), "one expert a tensor"
    assert "rank 1" in cli("plan", model, *layout(case))
    assert verify([str(model), "--export", str(exported[case])]) == 0


def test_the_official_safetensors_opens_every_export(exported):
    count = int(producer("open_with_safetensors.py", *exported.values(), python=TRANSFORMERS).strip())
    assert count == sum(len(list(d.glob("*.safetensors"))) for d in exported.values())


def test_fused_and_per_expert_saves_export_the_same_bytes(written, tmp_path):
    # The one random model, saved twice by transformers: its experts one a tensor and fused. The exports agree
    # byte for byte (every rank file), at ep 2 and with MoE-TP.
    for flags in (["--tp", "2", "--ep", "2"], ["--tp", "2"]):
        exports = []
        for case in ("qwen3_5_moe", "qwen3_5_moe-fused"):
            exports.append(tmp_path / f"{case}-{'-'.join(flags)}")
            cli("export", written[case], *flags, "--out", exports[-1])
        files = sorted(p.name for p in exports[0].glob("*.safetensors"))
        assert files == sorted(p.name for p in exports[1].glob("*.safetensors"))
        for name in files:
            assert (exports[0] / name).read_bytes() == (exports[1] / name).read_bytes(), (flags, name)


def test_a_live_model_updates_from_the_fused_save_and_rebalances(written):
    # The per-expert save's live model takes the fused save (its stacked sources read) and a rebalance that moves
    # every expert: equal to a fresh load of the fused save under the new placement, addresses kept.
    per_expert, fused = written["qwen3_5_moe"], written["qwen3_5_moe-fused"]
    live = shardload.LiveModel(per_expert, tp=2, ep=2)
    w13 = torch.from_dlpack(live.tensors(1)["model.layers.1.mlp.experts.w13_weight"])
    address = w13.data_ptr()
    assert live.update_weights(fused)["read_bytes"] > 0
    rows = [list(reversed(row)) for row in live.expert_map]
    assert live.rebalance(rows)["read_bytes"] == 0
    fresh = shardload.load(fused, tp=2, ep=2, expert_map=rows)
    for rank in range(2):
        for name, t in live.tensors(rank).items():
            assert torch.equal(torch.from_dlpack(t).view(torch.uint8),
                               torch.from_dlpack(fresh.tensors(rank)[name]).view(torch.uint8)), (rank, name)
    assert w13.data_ptr() == address


def test_vllm_loads_the_exports_of_transformers_checkpoints_as_its_own(written, tmp_path):
    # The independent check: vLLM 0.33's own load of each checkpoint transformers 5.25 wrote == its
    # sharded_state load of `shardload export --engine vllm` == the hooks, every rank byte-equal, at tp 2
    # (MoE: ep 2), in one group of 2 processes.
    sys.path.insert(0, str(HERE.parent / "engines"))
    import engines
    if not engines.ENGINES or not os.access(engines.ENGINES, os.X_OK):
        pytest.skip("no engines' environment (scripts/pypi-env.sh could not make it)")
    print(engines.check_engine(tmp_path, "vllm", 2, [(case, ep) for case, (_, _, ep) in CASES.items()],
                               checkpoints=written))
