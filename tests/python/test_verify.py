"""`shardload.verify`: rank tensors against the checkpoint, on every family and FP8 format, and two corrupted
exports it must catch, naming the module (issue 17, item 6)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from conftest import shardload_bin
from shardload import rank_source
from shardload.verify import default_layers, verify
from shardload.fp8 import decode_e4m3
from shardload.safetensors_io import SafetensorsError, SafetensorsFile, load_file, save_file

from verify_helpers import MOE, binary_for_export, check, export, layout_args  # noqa: F401 (an autouse fixture)


# llm-compressor's compressed-tensors FP8 for a dense, a MoE and an MLA family: per-tensor scales
# requantized where parts fuse, channel and block scales cut with their rows.
@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
@pytest.mark.parametrize("quant", ["ct-fp8-tensor", "ct-fp8-channel", "ct-fp8-block"])
def test_compressed_tensors_fp8_passes(tiny, arch, quant):
    report, layout = check(tiny(arch, quant), layout_args(arch))
    assert layout["quantization"] == "compressed-tensors"
    assert layout["weight_strategy"] == quant.rsplit("-", 1)[-1]
    modules = {c.module.split(" ", 2)[-1] for c in report.checks}
    assert any("experts.w2" in m for m in modules) == (arch in MOE)


def test_compressed_tensors_channel_rows_out_of_place_fail(tiny, tmp_path):
    # Two rows of a per-channel FP8 weight swapped under their unchanged scales: caught, named.
    model = tiny("llama", "ct-fp8-channel")
    out = export(model, tmp_path / "export", "--tp", "2")

    def swap(tensors):
        w = tensors["model.layers.0.self_attn.o_proj.weight"]
        w[[0, 1]] = w[[1, 0]].clone()

    rewrite_rank_file(os.path.join(out, "model-rank-1-part-0.safetensors"), swap)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert [c.module for c in report.failures] == ["layer 0 self_attn.o_proj"]


def test_data_parallel_layout_passes(tiny):
    report, layout = check(tiny("deepseek_v3"), ["--tp", "4", "--dp", "2", "--ep", "2"])
    assert layout["scopes"]["attention"] == "attention"
    o_proj = [c for c in report.checks if c.module.endswith("self_attn.o_proj")]
    assert o_proj and all("ranks [0, 1]" in c.where or "ranks [2, 3]" in c.where for c in o_proj)


def test_requantized_fp8_errors_are_inside_and_near_one_rounding(tiny):
    # Static FP8 fused layers are requantized to the largest part scale: nonzero error, within tolerance.
    report, _ = check(tiny("qwen3_moe", "fp8"), layout_args("qwen3_moe"))
    qkv = [c for c in report.checks if c.module.endswith("qkv_proj")]
    assert all(0 < c.error <= c.tolerance for c in qkv)


def rewrite_rank_file(path, edit):
    """Loads a bf16 rank file, lets `edit` change its tensors, writes it back with the same metadata."""
    tensors, meta = load_file(path)
    edit(tensors)
    save_file(path, tensors, meta)


def test_swapped_attention_heads_fail_naming_the_module(tiny, tmp_path):
    model = tiny("qwen3")
    out = export(model, tmp_path / "export", "--tp", "2")
    heads = json.load(open(os.path.join(model, "config.json")))
    d = heads.get("head_dim") or heads["hidden_size"] // heads["num_attention_heads"]

    def swap(tensors):
        w = tensors["model.layers.0.self_attn.qkv_proj.weight"]
        w[:2 * d] = torch.cat([w[d:2 * d].clone(), w[:d].clone()])  # q heads 0 and 1 of rank 1

    rewrite_rank_file(os.path.join(out, "model-rank-1-part-0.safetensors"), swap)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert not report.ok
    assert [c.module for c in report.failures] == ["layer 0 self_attn.qkv_proj"]
    assert report.failures[0].where == "rank 1 part q_proj"
    assert report.failures[0].error > 0.5

    cli = run_verify(model, "--tp", "2", "--export", out)
    assert cli.returncode == 1
    assert "layer 0 self_attn.qkv_proj at rank 1 part q_proj" in cli.stderr


def test_expert_w2_from_another_expert_fails_naming_the_slot(tiny, tmp_path):
    model = tiny("qwen3_moe")
    out = export(model, tmp_path / "export", "--tp", "2", "--ep", "2")
    ranks, layout = rank_source.load_export(out)
    name = min((n for n in ranks[0] if n.endswith("mlp.experts.w2_weight")), key=lambda n: int(n.split(".")[2]))
    layer = int(name.split(".")[2])
    assert layer in default_layers(ranks)  # the first MoE layer is sampled

    def take_other(tensors):
        w = tensors[name]
        w[0] = w[1].clone()  # slot 0 of EP rank 0 gets slot 1's down projection

    rewrite_rank_file(os.path.join(out, "model-rank-0-part-0.safetensors"), take_other)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert [c.module for c in report.failures] == [f"layer {layer} experts.w2"]
    assert report.failures[0].where.startswith("ep rank 0 slot 0 (expert 0)")

    cli = run_verify(model, "--tp", "2", "--ep", "2", "--export", out)
    assert cli.returncode == 1 and f"layer {layer} experts.w2 at ep rank 0 slot 0" in cli.stderr



# The families added after these checks were written: a head swap in each one's attention and a w2 taken
# from another expert are each caught, naming the module.
@pytest.mark.parametrize("arch,module,head_rows", [
    ("deepseek_v32", "self_attn.q_b_proj", lambda c: c["qk_nope_head_dim"] + c["qk_rope_head_dim"]),
    ("minimax_m2", "self_attn.qkv_proj", lambda c: c["head_dim"]),
    ("llama4", "self_attn.qkv_proj", lambda c: c["head_dim"]),
    ("gpt_oss", "self_attn.qkv_proj", lambda c: c["head_dim"]),
    # Qwen3-Next's layer 0 is linear attention: two key-head groups of in_proj_qkvz (q, k, v, z rows each).
    ("qwen3_next", "linear_attn.in_proj_qkvz",
     lambda c: 2 * c["linear_key_head_dim"] + 2 * c["linear_num_value_heads"] // c["linear_num_key_heads"]
     * c["linear_value_head_dim"]),
])
def test_new_families_catch_a_head_swap_and_an_expert_swap(tiny, tmp_path, arch, module, head_rows):
    model = tiny(arch)
    d = head_rows(json.load(open(os.path.join(model, "config.json"))))
    out = export(model, tmp_path / "heads", "--tp", "2", "--ep", "2")

    def swap_heads(tensors):
        w = tensors[f"model.layers.0.{module}.weight"]
        w[:2 * d] = torch.cat([w[d:2 * d].clone(), w[:d].clone()])  # the rank's first two heads

    rewrite_rank_file(os.path.join(out, "model-rank-1-part-0.safetensors"), swap_heads)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert [c.module for c in report.failures] == [f"layer 0 {module}"] and report.failures[0].where.startswith("rank 1")

    out = export(model, tmp_path / "experts", "--tp", "2", "--ep", "2")
    ranks, _ = rank_source.load_export(out)
    name = min((n for n in ranks[0] if n.endswith("experts.w2_weight")), key=lambda n: int(n.split(".")[2]))
    layer = int(name.split(".")[2])

    def take_other(tensors):
        tensors[name][0] = tensors[name][1].clone()

    rewrite_rank_file(os.path.join(out, "model-rank-0-part-0.safetensors"), take_other)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert [c.module for c in report.failures] == [f"layer {layer} experts.w2"]
    assert report.failures[0].where.startswith("ep rank 0 slot 0 (expert 0)")

def test_qwen3_next_catches_swapped_gated_heads_and_conv_channels(tiny, tmp_path):
    # The gated q_proj of a full-attention layer: a rank's first two heads (query and gate rows, 2 x head_dim
    # each) swapped; and in the conv1d, a rank's k channels taken for its q channels. Each is caught, named.
    model = tiny("qwen3_next")
    c = json.load(open(os.path.join(model, "config.json")))
    d = 2 * c["head_dim"]
    full = c["full_attention_interval"] - 1
    out = export(model, tmp_path / "export", "--tp", "2", "--ep", "2")
    q = c["linear_num_key_heads"] * c["linear_key_head_dim"] // 2

    def corrupt(tensors):
        w = tensors[f"model.layers.{full}.self_attn.qkv_proj.weight"]
        w[:2 * d] = torch.cat([w[d:2 * d].clone(), w[:d].clone()])
        conv = tensors["model.layers.0.linear_attn.conv1d.weight"]
        conv[:q] = conv[q:2 * q].clone()

    rewrite_rank_file(os.path.join(out, "model-rank-1-part-0.safetensors"), corrupt)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout, layers=[0, full])
    assert sorted(c.module for c in report.failures) == ["layer 0 linear_attn.conv1d",
                                                         f"layer {full} self_attn.qkv_proj"]
    assert all(c.where.startswith("rank 1") for c in report.failures)


def run_verify(*args):
    # The package this test imported (the build tree's, with the extension), in the child too.
    package_root = pathlib.Path(rank_source.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(package_root), SHARDLOAD_BIN=shardload_bin())
    return subprocess.run([sys.executable, "-m", "shardload.verify", *map(str, args)], capture_output=True,
                          text=True, env=env)


def test_cli_exports_and_passes(tiny):
    done = run_verify(tiny("mixtral"), "--tp", "2", "--ep", "2", "--layers", "1")
    assert done.returncode == 0, done.stderr
    assert "verified layers [1]" in done.stdout and "layer 1 experts.w13" in done.stdout
    assert "verify: OK" in done.stdout


def test_cli_refuses_a_layout_the_export_does_not_have(tiny, tmp_path):
    model = tiny("llama")
    out = export(model, tmp_path / "export", "--tp", "2")
    done = run_verify(model, "--tp", "4", "--export", out)
    assert done.returncode == 2 and "tp_size 2" in done.stderr


# ---- the safetensors reader treats files as hostile ----

def write_raw(path, header, data=b"", length=None):
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(raw) if length is None else length).to_bytes(8, "little") + raw + data)
    return str(path)


@pytest.mark.parametrize("header,data,length,field", [
    ({}, b"", 100_000_001, "header_length"),
    ({}, b"", 1 << 40, "header_length"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}}, b"\0" * 16, None, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, None, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b"", None, "shape"),
    ({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0", None, "dtype"),
])
def test_reader_rejects_bad_headers(tmp_path, header, data, length, field):
    with pytest.raises(SafetensorsError) as err:
        SafetensorsFile(write_raw(tmp_path / "bad.safetensors", header, data, length))
    assert err.value.field == field


def test_reader_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo.safetensors")
    with pytest.raises(SafetensorsError, match="not a regular file"):
        SafetensorsFile(str(tmp_path / "fifo.safetensors"))


def test_symlinked_checkpoint_files_verify_like_a_hugging_face_cache(tiny, tmp_path):
    model = tiny("llama")
    linked = tmp_path / "snapshot"
    linked.mkdir()
    for name in os.listdir(model):
        os.symlink(os.path.join(model, name), linked / name)
    check(str(linked), ["--tp", "2"])


def test_reader_round_trips_bf16_and_fp8_codes(tmp_path):
    t = {"b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16), "q": torch.tensor([0x38, 0xC0], dtype=torch.uint8)}
    save_file(str(tmp_path / "x.safetensors"), t, {"k": "v"}, dtypes={"q": "F8_E4M3"})
    got, meta = load_file(str(tmp_path / "x.safetensors"))
    assert meta == {"k": "v"} and torch.equal(got["b"], t["b"]) and torch.equal(got["q"], t["q"])
    assert SafetensorsFile(str(tmp_path / "x.safetensors")).dtype("q") == "F8_E4M3"


def test_e4m3_table_follows_the_bit_layout():
    codes = torch.tensor([0x00, 0x01, 0x08, 0x38, 0x7E, 0xC0, 0x7F, 0xFF], dtype=torch.uint8)
    got = decode_e4m3(codes)
    assert got[:6].tolist() == [0.0, 2.0 ** -9, 2.0 ** -6, 1.0, 448.0, -2.0]
    assert torch.isnan(got[6:]).all()


def test_unknown_and_malformed_rank_tensors_are_named_not_crashed_on(tiny):
    model = tiny("qwen2")
    ranks, layout = rank_source.export_with_cli(model, ["--tp", "2"])
    ranks[1]["model.layers.0.self_attn.extra.weight"] = torch.zeros(4)
    ranks[0]["model.layers.0.self_attn.o_proj.weight"] = ranks[0]["model.layers.0.self_attn.o_proj.weight"][:, 1:]
    report = verify(model, ranks, layout, layers=[0])
    assert not report.ok
    assert any("rank 1 tensor model.layers.0.self_attn.extra.weight was not verified" in p for p in report.problems)
    assert any(p.startswith("layer 0 self_attn.o_proj: cannot be checked") and "rank 0" in p
               for p in report.problems)
    # The other modules of the layer were still checked.
    assert any(c.module == "layer 0 self_attn.qkv_proj" and c.ok for c in report.checks)


def test_experts_are_checked_through_the_expert_map(tiny, tmp_path):
    model = tiny("qwen2_moe")
    layers = json.load(open(os.path.join(model, "config.json")))["num_hidden_layers"]
    perm = [3, 0, 7, 5, 1, 6, 2, 4]  # every MoE layer of qwen2_moe: physical p holds logical perm[p]
    (tmp_path / "map.json").write_text(json.dumps({"physical_to_logical_map": [perm] * layers}))
    report, layout = check(model, ["--tp", "2", "--ep", "2", "--expert-map", tmp_path / "map.json"])
    assert layout["physical_to_logical_map"][0] == perm
    ranks, layout = rank_source.export_with_cli(model, ["--tp", "2", "--ep", "2", "--expert-map",
                                                        tmp_path / "map.json"])
    layout["physical_to_logical_map"] = [list(range(8))] * layers  # a manifest that lies about the placement
    failed = {c.module.split(" ", 2)[-1] for c in verify(model, ranks, layout).failures}
    assert failed == {"experts.w13", "experts.w2"}


def test_gpt_oss_mxfp4_is_kept_verified_and_a_changed_code_is_caught(tiny, tmp_path):
    # gpt-oss as the Hub stores it: MXFP4 experts. The export keeps the U8 codes and E8M0 scales under vLLM's
    # names, cut on whole 32-value groups; verify decodes both sides; one changed code byte is caught.
    model = tiny("gpt_oss", "mxfp4")
    config = json.load(open(os.path.join(model, "config.json")))
    assert config["quantization_config"]["quant_method"] == "mxfp4"
    e, h, i = config["num_local_experts"], config["hidden_size"], config["intermediate_size"]
    out = export(model, tmp_path / "mxfp4", "--tp", "4", "--ep", "2")  # 4 experts a rank, MoE-TP 2
    ranks, layout = rank_source.load_export(out)
    x = "model.layers.0.mlp.experts."
    expected = {"w13_weight": [e // 2, i, h // 2], "w13_weight_scale": [e // 2, i, h // 32],
                "w2_weight": [e // 2, h, i // 4], "w2_weight_scale": [e // 2, h, i // 64]}
    for name, shape in expected.items():
        t = ranks[1][x + name]
        assert t.dtype == torch.uint8 and list(t.shape) == shape, (name, t.dtype, list(t.shape))
    assert ranks[1][x + "w13_bias"].dtype == torch.bfloat16
    assert not ranks[1][x + "w2_bias"].any(), "the w2 bias lives on each EP rank's first MoE-TP rank only"
    report = verify(model, ranks, layout)
    assert report.ok, "\n".join(report.lines())
    assert any(c.module == "layer 0 experts biases" for c in report.checks)

    def change_a_code(tensors):
        tensors[x + "w13_weight"][0, 0, 0] ^= 0x11

    rewrite_rank_file(os.path.join(out, "model-rank-1-part-0.safetensors"), change_a_code)
    ranks, layout = rank_source.load_export(out)
    report = verify(model, ranks, layout)
    assert [c.module for c in report.failures] == ["layer 0 experts.w13"]
    assert report.failures[0].where.startswith("rank 1 slot 0")
