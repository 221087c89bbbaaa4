"""The library from Python: checkpoints (by path or Hugging Face model id), plans as dicts, loads with every
layout option of the command line, live models updated and rebalanced in place, exports, progress callbacks
and typed errors."""
import json
import pathlib
import threading

import pytest
import torch

import shardload
from shardload.verify import verify
from conftest import run_shardload
from test_tensors import checksums, xxh3_hex


def test_checkpoint_is_inspected(tiny):
    model = tiny("qwen3_moe")
    ckpt = shardload.Checkpoint(model)
    assert ckpt.config["model_type"] == "qwen3_moe"
    assert len(ckpt) == len(ckpt.tensors) > 0 and ckpt.files
    norm = next(t for t in ckpt.tensors if t["name"] == "model.norm.weight")
    assert norm["dtype"] == "BF16" and norm["shape"] == [ckpt.config["hidden_size"]]
    with pytest.raises(shardload.Error) as error:
        shardload.Checkpoint(str(model) + "-missing")
    assert error.value.file.endswith("-missing") and error.value.kind in ("io", "config")


def test_plan_is_the_command_lines_json(tiny):
    model = tiny("deepseek_v3")
    flags = ["--tp", "4", "--ep", "2", "--dp", "2", "--enable-dp-lm-head"]
    cli = json.loads(run_shardload("plan", model, *flags, "--json").stdout)
    assert shardload.plan(model, tp=4, ep=2, dp=2, enable_dp_lm_head=True) == cli


# Keyword arguments and the command-line flags they stand for.
LAYOUTS = [
    ({"tp": 4, "ep": 2}, ["--tp", "4", "--ep", "2"]),
    ({"tp": 4, "dp": 2, "ep": 4, "enable_dp_lm_head": True, "moe_dense_tp_size": 1},
     ["--tp", "4", "--dp", "2", "--ep", "4", "--enable-dp-lm-head", "--moe-dense-tp-size", "1"]),
    ({"tp": 4, "dp": 4, "moe_a2a_backend": "deepep"}, ["--tp", "4", "--dp", "4", "--moe-a2a-backend", "deepep"]),
    ({"tp": 4, "dp": 2, "dp_style": "vllm", "enable_expert_parallel": True},
     ["--tp", "4", "--dp", "2", "--dp-style", "vllm", "--enable-expert-parallel"]),
    ({"tp": 2, "ep": 2, "redundant_experts": 2, "row_bias": "divided", "split_shared_experts": False},
     ["--tp", "2", "--ep", "2", "--redundant-experts", "2", "--row-bias", "divided", "--no-split-shared-experts"]),
    ({"tp": 2, "dtype": "fp32", "quantization": "fp8"}, ["--tp", "2", "--dtype", "fp32", "--quantization", "fp8"]),
]


@pytest.mark.parametrize("kwargs,flags", LAYOUTS, ids=[" ".join(f) for _, f in LAYOUTS])
def test_every_layout_option_loads_what_the_command_line_loads(tiny, kwargs, flags):
    model = tiny("qwen2_moe")
    lines = run_shardload("load", model, *flags, "--checksum").stdout.splitlines()
    expected = {(int(p[0]), p[1]): p[4] for p in (line.split("\t") for line in lines) if len(p) == 5}
    loaded = shardload.load(model, **kwargs)
    got = {(r, name): xxh3_hex(torch.from_dlpack(t)) for r in loaded.ranks for name, t in loaded.tensors(r).items()}
    assert got == expected


def test_expert_map_as_a_list_or_a_file(tiny, tmp_path):
    model = tiny("qwen3_moe")
    rows = shardload.plan(model, tp=2, ep=2, pieces=False)["physical_to_logical_map"]
    rows = [list(reversed(row)) for row in rows]
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"physical_to_logical_map": rows}))
    a = shardload.load(model, tp=2, ep=2, expert_map=rows)
    b = shardload.load(model, tp=2, ep=2, expert_map=str(path))
    assert a.plan()["physical_to_logical_map"] == rows == b.plan()["physical_to_logical_map"]
    with pytest.raises(shardload.InvalidArgumentError) as error:
        shardload.load(model, tp=2, ep=2, expert_map=[[0, 0]])
    assert "expert map" in str(error.value)


def test_one_rank_and_the_errors_of_a_bad_layout(tiny):
    model = tiny("llama")
    loaded = shardload.load(model, tp=4, ranks=[2])
    assert loaded.ranks == [2]
    with pytest.raises(IndexError):
        loaded.tensors(0)
    with pytest.raises(shardload.InvalidArgumentError, match="does not divide 8 attention heads") as error:
        shardload.load(model, tp=3)
    assert error.value.kind == "invalid_argument"
    with pytest.raises(TypeError, match="unexpected layout keyword argument 'tensor_parallel'"):
        shardload.load(model, tensor_parallel=2)
    with pytest.raises(shardload.InvalidArgumentError) as error:
        shardload.load(model, io="fast")
    assert error.value.field == "io" and error.value.found == "fast"


def test_progress_runs_on_the_loading_threads_with_the_gil_released(tmp_path):
    model = tmp_path / "model"
    run_shardload("make-tiny", "--arch", "qwen3_moe", "--size", "64000000", "--seed", "3", "--out", model)
    caller = threading.get_ident()
    other_thread_called = threading.Event()
    calls = []

    def progress(done, total):
        calls.append((done, total))
        if threading.get_ident() != caller:
            other_thread_called.set()
        elif len(calls) == 1:
            # Waiting releases the GIL: a loading thread can call in only if shardload released it too
            # (else it would wait for the GIL this thread's load holds, and this wait would time out).
            other_thread_called.wait(timeout=120)

    loaded = shardload.load(str(model), tp=2, ep=2, threads=2, io="pread", progress=progress)
    assert other_thread_called.is_set(), "no loading thread could call back: the GIL was held"
    assert calls[-1][0] == calls[-1][1] == loaded.stats["bytes_read"]
    assert [done for done, _ in calls] == sorted(done for done, _ in calls), "progress went back"

    def fail(done, total):
        raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        shardload.load(str(model), tp=2, ep=2, progress=fail)


def test_live_model_updates_in_place(tiny):
    a, b = tiny("qwen3_moe", seed=1), tiny("qwen3_moe", seed=2)
    live = shardload.LiveModel(a, tp=2, ep=2)
    qkv = torch.from_dlpack(live.tensors(0)["model.layers.0.self_attn.qkv_proj.weight"])
    w13 = torch.from_dlpack(live.tensors(1)["model.layers.1.mlp.experts.w13_weight"])
    address, before = qkv.data_ptr(), qkv.clone()
    expert_before = w13.clone()
    fresh_b = shardload.load(b, tp=2, ep=2)

    result = live.update_weights(b, filter="self_attn")
    assert result["version"] == live.version == 1 and result["updated_tensors"] > 0
    assert qkv.data_ptr() == address and not torch.equal(qkv, before)
    assert torch.equal(qkv, torch.from_dlpack(fresh_b.tensors(0)["model.layers.0.self_attn.qkv_proj.weight"]))
    assert torch.equal(w13, expert_before), "experts were not selected"

    live.update_weights(b, {"substrings": ["mlp.experts"]})
    assert torch.equal(w13, torch.from_dlpack(fresh_b.tensors(1)["model.layers.1.mlp.experts.w13_weight"]))

    # A failed update changes nothing and says why.
    snapshot = qkv.clone()
    with pytest.raises(shardload.Error) as error:
        live.update_weights(str(a) + "-missing")
    assert error.value.file
    assert torch.equal(qkv, snapshot) and live.version == 2

    # Rebalance: the reversed placement moves live bytes; a fresh load of B under it agrees.
    live.update_weights(b)
    rows = [list(reversed(row)) for row in live.expert_map]
    moved = live.rebalance(rows)
    assert moved["read_bytes"] == 0 and live.expert_map == rows
    fresh = shardload.load(b, tp=2, ep=2, expert_map=rows)
    for rank in range(2):
        for name, t in live.tensors(rank).items():
            assert torch.equal(torch.from_dlpack(t).view(torch.uint8),
                               torch.from_dlpack(fresh.tensors(rank)[name]).view(torch.uint8)), name


@pytest.mark.parametrize("arch,probe", [("deepseek_v32", "model.layers.1.self_attn.indexer.wq_b.weight"),
                                        ("minimax_m2", "model.layers.1.self_attn.k_norm.weight"),
                                        ("qwen3_next", "model.layers.0.linear_attn.conv1d.weight"),
                                        ("llama4", "model.layers.1.feed_forward.experts.w13_weight"),
                                        ("gpt_oss", "model.layers.1.mlp.experts.w2_bias"),
                                        ("gpt_oss:mxfp4", "model.layers.1.mlp.experts.w13_weight_scale")])
def test_new_families_update_and_rebalance_in_place(tiny, arch, probe):
    # DeepSeek-V3.2's replicated indexer, MiniMax-M2's split per-layer norms, Qwen3-Next's conv1d (three row
    # ranges of one tensor), Llama-4's and gpt-oss's fused experts (gpt-oss's MXFP4 too), and their experts: an
    # update from a second checkpoint and a rebalance keep every address and equal a fresh load of B under the
    # new placement.
    arch, _, quant = arch.partition(":")
    a, b = tiny(arch, quant or "none", seed=1), tiny(arch, quant or "none", seed=2)
    live = shardload.LiveModel(a, tp=2, ep=2)
    watched = torch.from_dlpack(live.tensors(1)[probe])
    address = watched.data_ptr()
    live.update_weights(b)
    rows = [list(reversed(row)) for row in live.expert_map]
    assert live.rebalance(rows)["read_bytes"] == 0
    fresh = shardload.load(b, tp=2, ep=2, expert_map=rows)
    for rank in range(2):
        for name, t in live.tensors(rank).items():
            assert torch.equal(torch.from_dlpack(t).view(torch.uint8),
                               torch.from_dlpack(fresh.tensors(rank)[name]).view(torch.uint8)), name
    assert watched.data_ptr() == address
    assert torch.equal(watched, torch.from_dlpack(fresh.tensors(1)[probe]))

def test_export_and_load_it_back(tiny, tmp_path):
    model = tiny("deepseek_v3")
    summary = shardload.export(model, str(tmp_path / "out"), tp=2, ep=2, max_file_size="1M")
    assert summary["ranks"] == 2
    exported = shardload.load_export(str(tmp_path / "out"))
    loaded = shardload.load(model, tp=2, ep=2)
    for rank, tensors in exported.items():
        assert tensors.keys() == loaded.tensors(rank).keys()
        for name, t in tensors.items():
            assert xxh3_hex(torch.from_dlpack(t)) == xxh3_hex(torch.from_dlpack(loaded.tensors(rank)[name]))
    with pytest.raises(shardload.InvalidArgumentError):
        shardload.export(model, str(tmp_path / "out"), tp=2, ep=2)  # not empty, no overwrite


def test_paths_may_be_pathlib_paths(tiny, tmp_path):
    model = pathlib.Path(tiny("qwen3_moe"))
    rows = shardload.plan(model, tp=2, ep=2, pieces=False)["physical_to_logical_map"]
    (tmp_path / "map.json").write_text(json.dumps({"physical_to_logical_map": rows}))
    assert shardload.Checkpoint(model).path == str(model)
    assert shardload.load(model, tp=2, ep=2, expert_map=tmp_path / "map.json").ranks == [0, 1]
    live = shardload.LiveModel(model, tp=2, ep=2)
    assert live.update_weights(model, "self_attn")["version"] == 1
    shardload.export(model, tmp_path / "out", tp=2, ep=2)
    assert sorted(shardload.load_export(tmp_path / "out")) == [0, 1]
    with pytest.raises(TypeError, match="expected a path"):
        shardload.load(42)


def test_a_hugging_face_model_id_is_found_in_the_local_cache(tiny, tmp_path, monkeypatch):
    """A model id downloaded into the Hugging Face cache (as huggingface_hub lays it out: blobs, the
    snapshot's links to them, refs/main) goes wherever a model directory does: the same bytes."""
    model = pathlib.Path(tiny("qwen3_moe"))
    repo = tmp_path / "hub" / "models--someorg--tiny-moe"
    commit = "fedcba9876543210fedcba9876543210fedcba98"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(model.iterdir())):
        (repo / "blobs" / f"blob{i}").write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(f"../../blobs/blob{i}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    assert shardload.Checkpoint("someorg/tiny-moe").path == str(snapshot)
    by_id, by_path = shardload.load("someorg/tiny-moe", tp=2, ep=2), shardload.load(model, tp=2, ep=2)
    for rank in (0, 1):
        ids, paths = by_id.tensors(rank), by_path.tensors(rank)
        assert ids.keys() == paths.keys()
        assert all(xxh3_hex(torch.from_dlpack(ids[n])) == xxh3_hex(torch.from_dlpack(paths[n])) for n in ids)
    assert checksums("someorg/tiny-moe", {"tp": 2, "ep": 2}) == checksums(model, {"tp": 2, "ep": 2})  # the CLI
    shardload.export("someorg/tiny-moe", tmp_path / "out", tp=2, ep=2)
    ranks = [{n: torch.from_dlpack(t) for n, t in tensors.items()}
             for _, tensors in sorted(shardload.load_export(tmp_path / "out").items())]
    layout = json.loads((tmp_path / "out" / "shardload.json").read_text())
    assert verify("someorg/tiny-moe", ranks, layout).ok
    with pytest.raises(shardload.IoError, match="hf download someorg/absent"):
        shardload.load("someorg/absent", tp=2, ep=2)
