"""Checkpoints as Hugging Face transformers writes them (save_pretrained: every fine-tune and RL step)."""
import filecmp
import json

import pytest
import shardload
import torch
from shardload.verify import main as verify

from producers import DENSE, MOE, cli, layout, needs_producers, producer

pytestmark = needs_producers

# Float32 tensors of make-tiny's checkpoints that transformers' bf16 load casts (name endings).
CAST_BY_TRANSFORMERS = {"minimax_m2": ("block_sparse_moe.gate.weight", "block_sparse_moe.e_score_correction_bias")}


@pytest.fixture(scope="module")
def resaved(tmp_path_factory):
    """{arch: (make-tiny dir, the same weights loaded and saved again by transformers' save_pretrained)}."""
    root = tmp_path_factory.mktemp("resaved")
    pairs = {}
    for arch in DENSE + MOE:
        tiny = root / f"tiny-{arch}"
        cli("make-tiny", "--arch", arch, "--out", tiny)
        pairs[arch] = (tiny, root / f"saved-{arch}")
    producer("save_pretrained.py", *[p for pair in pairs.values() for p in pair])
    return pairs


@pytest.fixture(scope="module")
def random_init(tmp_path_factory, request):
    """{arch: a tiny random model built by transformers from make-tiny's config and saved by it}, for the families
    the selected tests name (every family under `make test-matrix`)."""
    root = tmp_path_factory.mktemp("random")
    models = {}
    selected = {item.callspec.params["arch"] for item in request.session.items
                if hasattr(item, "callspec") and "tp" in item.callspec.params}
    for arch in [arch for arch in DENSE + MOE if arch in selected]:
        cli("make-tiny", "--arch", arch, "--out", root / f"config-{arch}")
        models[arch] = root / f"random-{arch}"
    producer("random_init.py", 3, *[p for arch in models for p in (root / f"config-{arch}", models[arch])])
    return models


@pytest.mark.parametrize("arch", DENSE + MOE)
def test_transformers_save_pretrained_exports_byte_identical(resaved, tmp_path, arch):
    tiny, saved = resaved[arch]
    config = json.loads((saved / "config.json").read_text())
    assert "dtype" in config, "transformers 5 writes dtype (torch_dtype before)"
    assert len(list(saved.glob("*.safetensors"))) > 1, "sharded, with an index"
    exports = []
    for model in (tiny, saved):
        out = tmp_path / f"export-{model.name}"
        cli("export", model, *layout(arch), "--out", out)
        exports.append(out)
    files = sorted(p.name for p in exports[0].glob("*.safetensors"))
    assert files and files == sorted(p.name for p in exports[1].glob("*.safetensors"))
    if arch in CAST_BY_TRANSFORMERS:
        # transformers loads every parameter in the model dtype: MiniMax-M2's float32 router and score
        # bias come back rounded to bf16 (it writes them BF16). Everything else is byte-identical, and those
        # equal make-tiny's values rounded to bf16.
        tiny_ranks, saved_ranks = shardload.load_export(exports[0]), shardload.load_export(exports[1])
        rounded = 0
        for rank, tensors in tiny_ranks.items():
            for name, t in tensors.items():
                want, got = torch.from_dlpack(t), torch.from_dlpack(saved_ranks[rank][name])
                if name.endswith(CAST_BY_TRANSFORMERS[arch]):
                    want, rounded = want.to(torch.bfloat16).to(want.dtype), rounded + 1
                assert torch.equal(want.view(torch.uint8), got.view(torch.uint8)), (rank, name)
        assert rounded > 0
        return
    match, mismatch, errors = filecmp.cmpfiles(exports[0], exports[1], files, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


# A dense, a MoE and an MLA family's random model at tp 2 in `make test`; every family at tp 1, 2 and 4 under
# `make test-matrix`. Every family's names as transformers writes them are `make test`'s all the same (the
# save_pretrained test above), and so is every family's verify (tests/python/test_verify_families.py).
CORE = ("llama", "qwen3_moe", "deepseek_v3")
RANDOM_CASES = [pytest.param(arch, tp, marks=() if tp == 2 and arch in CORE else pytest.mark.matrix)
                for arch in DENSE + MOE for tp in (1, 2, 4)]


@pytest.mark.parametrize("arch, tp", RANDOM_CASES)
def test_a_random_model_transformers_built_plans_loads_exports_and_verifies(random_init, official_safetensors, tmp_path,
                                                                           arch, tp):
    model = random_init[arch]
    if tp == 2:
        config = json.loads((model / "config.json").read_text())
        assert "dtype" in config and "transformers_version" in config
        assert len(list(model.glob("*.safetensors"))) > 1, "sharded, with an index"
        assert arch in cli("inspect", model)
        assert "rank 1" in cli("plan", model, *layout(arch, 2))
        cli("load", model, *layout(arch, 4))
    out = tmp_path / f"tp{tp}"
    cli("export", model, *layout(arch, tp), "--out", out)
    assert verify([str(model), "--export", str(out)]) == 0, f"verify at tp {tp}"
    official_safetensors.extend([model, out])


def test_llama4_multimodal_checkpoint_loads_its_text_model(official_safetensors, tmp_path):
    # transformers' own Llama4ForConditionalGeneration (random, with a small vision tower), saved by
    # save_pretrained: the text model lives under language_model., beside vision_model and the projector.
    text = tmp_path / "text"
    cli("make-tiny", "--arch", "llama4", "--out", text)
    model = tmp_path / "multimodal"
    producer("llama4_multimodal.py", 3, text, model)
    names = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(n.startswith("vision_model.") for n in names) and any(n.startswith("language_model.") for n in names)
    skipped = sum(1 for n in names if not n.startswith("language_model."))
    planned = cli("plan", model, *layout("llama4", 2), stderr=True)
    towers = ", ".join(sorted({n.split(".")[0] + ".*" for n in names if not n.startswith("language_model.")}))
    assert f"{skipped} tensors of {towers} (the vision tower and projector) are skipped; shardload loads the " \
        "text model (language_model.*)" in planned
    for tp in (2, 4):
        out = tmp_path / f"tp{tp}"
        cli("export", model, *layout("llama4", tp), "--out", out)
        ranks = shardload.load_export(out)
        assert all(n.startswith("language_model.") for rank in ranks.values() for n in rank), "vLLM's mllama4 names"
        assert verify([str(model), "--export", str(out)]) == 0, f"verify at tp {tp}"
    official_safetensors.extend([model, tmp_path / "tp2"])


# The multimodal wrappers and Gemma 4's own configs: one kind of each in `make test`, the other in the matrix (the
# wrapper's names do not depend on the text model inside; test_transformers_5_25.py saves both kinds' text models
# in the gate).
@pytest.mark.parametrize("arch", [pytest.param("qwen3_5", marks=pytest.mark.matrix), "qwen3_5_moe"])
def test_qwen3_5_multimodal_checkpoint_loads_its_text_model(official_safetensors, tmp_path, arch):
    # transformers' own Qwen3_5(Moe)ForConditionalGeneration (random, with a small vision tower), saved by
    # save_pretrained: the text model lives under model.language_model. (in place of model.), the vision tower
    # under model.visual., lm_head outside both.
    text = tmp_path / "text"
    cli("make-tiny", "--arch", arch, "--out", text)
    model = tmp_path / "multimodal"
    producer("qwen3_5_multimodal.py", 3, text, model)
    names = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" in names and any(n.startswith("model.language_model.layers.") for n in names)
    skipped = sum(1 for n in names if n.startswith("model.visual."))
    assert skipped > 0
    planned = cli("plan", model, *layout(arch, 2), stderr=True)
    assert f"{skipped} tensors of model.visual.* (the vision tower and projector) are skipped" in planned
    for tp in (2, 4):
        out = tmp_path / f"tp{tp}"
        cli("export", model, *layout(arch, tp), "--out", out)
        ranks = shardload.load_export(out)
        assert all(n == "lm_head.weight" or n.startswith("model.language_model.")
                   for rank in ranks.values() for n in rank), "the checkpoint's names"
        assert verify([str(model), "--export", str(out)]) == 0, f"verify at tp {tp}"
    official_safetensors.extend([model, tmp_path / "tp2"])


@pytest.mark.parametrize("kind", ["dense", pytest.param("moe", marks=pytest.mark.matrix)])
def test_gemma4_transformers_built_from_its_own_config_plans_loads_exports_and_verifies(official_safetensors, tmp_path,
                                                                                       kind):
    # transformers' own Gemma4TextConfig and Gemma4ForCausalLM (gemma4_random.py: not make-tiny's config),
    # random init, save_pretrained: the full layers' geometry as per_layer_config, the shared-KV layers with
    # q_proj alone, the MoE block beside the dense MLP with kind "moe".
    model = tmp_path / kind
    producer("gemma4_random.py", 3, kind, model)
    config = json.loads((model / "config.json").read_text())
    assert "per_layer_config" in config and config["num_kv_shared_layers"] == 2
    assert config.get("enable_moe_block", False) == (kind == "moe")
    assert "gemma4" in cli("inspect", model)

    def flags(tp):  # as layout(): the MoE model with expert parallelism 2 from tp 2 on
        return ["--tp", str(tp)] + (["--ep", "2"] if kind == "moe" and tp > 1 else [])
    assert "rank 1" in cli("plan", model, *flags(2))
    cli("load", model, *flags(4))
    for tp in (1, 2, 4):
        out = tmp_path / f"tp{tp}"
        cli("export", model, *flags(tp), "--out", out)
        assert verify([str(model), "--export", str(out)]) == 0, f"verify at tp {tp}"
    official_safetensors.extend([model, *(tmp_path / f"tp{tp}" for tp in (1, 2, 4))])


@pytest.mark.parametrize("kind", [pytest.param("dense", marks=pytest.mark.matrix), "moe"])
def test_gemma4_multimodal_checkpoint_loads_its_text_model(official_safetensors, tmp_path, kind):
    # transformers' own Gemma4ForConditionalGeneration (random, with a small vision tower) around the text model
    # of gemma4_random.py, saved by save_pretrained: the text model under model.language_model., the vision
    # tower under model.vision_tower. and model.embed_vision., the head tied.
    text = tmp_path / "text"
    producer("gemma4_random.py", 3, kind, text)
    model = tmp_path / "multimodal"
    producer("gemma4_multimodal.py", 3, text, model)
    names = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(n.startswith("model.language_model.layers.") for n in names) and "lm_head.weight" not in names
    skipped = sum(1 for n in names if n.startswith(("model.vision_tower.", "model.embed_vision.")))
    assert skipped > 0 and skipped + sum(1 for n in names if n.startswith("model.language_model.")) == len(names)
    ep = ["--ep", "2"] if kind == "moe" else []
    planned = cli("plan", model, "--tp", 2, *ep, stderr=True)
    assert f"{skipped} tensors of model.embed_vision.*, model.vision_tower.* (the vision tower and projector) " \
           "are skipped" in planned
    for tp in (2, 4):
        out = tmp_path / f"tp{tp}"
        cli("export", model, "--tp", tp, *ep, "--out", out)
        ranks = shardload.load_export(out)
        assert all(n.startswith("model.language_model.") for rank in ranks.values() for n in rank), "the checkpoint's names"
        assert verify([str(model), "--export", str(out)]) == 0, f"verify at tp {tp}"
    official_safetensors.extend([model, tmp_path / "tp2"])
