"""`export --engine vllm|sglang|fastdeploy` (and shardload.export(engine=...)): rank files with the names,
buffers and dtypes of that engine's sharded_state loader, recorded in shardload.json and in every rank file,
which load_export checks against the export's own plan under the engine's names. What an engine cannot take
is refused before the load, naming it. (tests/engines/ has vLLM and SGLang themselves load these exports.)"""
import json
import pathlib
import re
import struct

import pytest

import shardload
from conftest import engine_module, read_safetensors, run_shardload


def rank_tensors(out, rank):
    """{name: (dtype, shape, bytes)} of every part of one rank, read directly."""
    manifest = json.loads((pathlib.Path(out) / "shardload.json").read_text())
    tensors = {}
    for name in manifest["ranks"][rank]["files"]:
        tensors.update(read_safetensors(pathlib.Path(out) / name))
    return tensors


def metadata(out, rank):
    data = (pathlib.Path(out) / f"model-rank-{rank}-part-0.safetensors").read_bytes()
    return json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]


def export(model, out, *flags):
    done = run_shardload("export", model, "--out", out, *flags, check=False)
    assert done.returncode == 0, done.stderr
    return str(out)


def bf16_of_f32(blob):
    """float32 values rounded to bfloat16 (nearest, ties to even), as bytes."""
    out = b""
    for (bits,) in struct.iter_unpack("<I", blob):
        out += (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).to_bytes(2, "little")
    return out


def test_vllm_names_buffers_and_dtypes(tiny, tmp_path):
    model = tiny("qwen3")
    plain = export(model, tmp_path / "plain", "--tp", 2)
    vllm = export(model, tmp_path / "vllm", "--tp", 2, "--engine", "vllm")
    assert "engine" not in json.loads((pathlib.Path(plain) / "shardload.json").read_text())
    assert "engine" not in metadata(plain, 0)
    assert json.loads((pathlib.Path(vllm) / "shardload.json").read_text())["engine"] == "vllm"
    assert metadata(vllm, 1)["engine"] == "vllm"
    for rank in range(2):
        a, b = rank_tensors(plain, rank), rank_tensors(vllm, rank)
        # q/k norms in the model dtype (the layout's float32 rounded), vLLM's attention scales added.
        q_norm = "model.layers.0.self_attn.q_norm.weight"
        assert a[q_norm][0] == "F32" and b[q_norm][0] == "BF16"
        assert b[q_norm][2] == bf16_of_f32(a[q_norm][2])
        scales = {n for n in b if n.startswith("model.layers.0.self_attn.attn.")}
        assert scales == {f"model.layers.0.self_attn.attn._{s}_scale" for s in ("k", "v", "q", "prob")}
        for name in scales:
            assert b[name] == ("F32", [], struct.pack("<f", 1.0))
        # Tied embeddings: the table under lm_head.weight, the name vLLM's state dict keeps.
        assert b["lm_head.weight"] == a["model.embed_tokens.weight"]
        assert "model.embed_tokens.weight" not in b
        same = {n for n in a if "norm" not in n and n != "model.embed_tokens.weight"}
        assert all(a[n] == b[n] for n in same)
    # load_export takes it, with the engine's names.
    loaded = shardload.load_export(vllm)
    assert "model.layers.0.self_attn.attn._k_scale" in loaded[0]
    assert run_shardload("load", vllm, "--checksum").returncode == 0


def test_vllm_moe_and_mla_names(tiny, tmp_path):
    names = set(rank_tensors(export(tiny("deepseek_v3"), tmp_path / "ds", "--tp", 2, "--ep", 2,
                                    "--engine", "vllm"), 0))
    for name in ("model.layers.1.mlp.experts.routed_experts.w13_weight", "model.layers.1.mlp.experts.gate.weight",
                 "model.layers.1.mlp.experts.gate.e_score_correction_bias",
                 "model.layers.1.mlp.experts._shared_experts._layer.gate_up_proj.weight",
                 "model.layers.1.self_attn.mla_attn.o_proj.weight", "model.layers.1.self_attn.mla_attn.q_b_proj.weight",
                 "model.layers.1.self_attn.mla_attn.mla_attn._k_scale",
                 "model.layers.1.self_attn.fused_qkv_a_proj.weight"):
        assert name in names, name
    assert not {n for n in names if ".mlp.gate." in n or ".mlp.experts.w13" in n}


# The KV-cache slots vLLM's attention holds under each FP8 config: quant_method fp8's four scalars, unset
# (-1 in the model dtype); compressed-tensors' q/k/v scales F32 [1] at 1 and their zero points [1] at 0 in
# the model dtype (no prob_scale).
VLLM_KV_SLOTS = {
    "fp8": {f"{s}_scale": ("BF16", [], bytes.fromhex("80bf")) for s in ("k", "v", "q", "prob")},
    "ct-fp8-tensor": {**{f"{s}_scale": ("F32", [1], struct.pack("<f", 1.0)) for s in "kvq"},
                      **{f"{s}_zero_point": ("BF16", [1], bytes(2)) for s in "kvq"}},
}


@pytest.mark.parametrize("quant", VLLM_KV_SLOTS)
def test_vllm_fp8_one_scale_per_fused_part(tiny, tmp_path, quant):
    """Static per-tensor FP8 for vLLM (quant_method fp8, and llm-compressor's compressed-tensors): the
    layout's codes (requantized once), its one scale of a fused layer in each of vLLM's slots per part (not
    the engines' mark of a layer fused on disk, the lowest float32 after the first: the branches of their
    post-processing that spread each part's scale over its rows, vLLM's Marlin and SGLang's cutlass, would
    give the other parts' rows that scale), and the attention modules' KV-cache slots of that config."""
    model = tiny("llama", quant)
    plain = export(model, tmp_path / "plain", "--tp", 2)
    vllm = export(model, tmp_path / "vllm", "--tp", 2, "--engine", "vllm")
    prefix = "model.layers.1.self_attn.attn."
    for rank in range(2):
        a, b = rank_tensors(plain, rank), rank_tensors(vllm, rank)
        for fused, parts in (("self_attn.qkv_proj", 3), ("mlp.gate_up_proj", 2)):
            for scale in ("weight_scale", "input_scale"):
                name = f"model.layers.1.{fused}.{scale}"
                assert a[name][:2] == ("F32", [1])
                assert b[name] == ("F32", [parts], a[name][2] * parts), name
            assert b[f"model.layers.1.{fused}.weight"] == a[f"model.layers.1.{fused}.weight"]
        assert b["model.layers.1.self_attn.o_proj.weight_scale"] == a["model.layers.1.self_attn.o_proj.weight_scale"]
        slots = {n.removeprefix(prefix): b[n] for n in b if n.startswith(prefix) and not n.startswith(prefix + "_")}
        assert slots == VLLM_KV_SLOTS[quant]
        for slot in ("k", "v", "q", "prob"):
            assert b[f"{prefix}_{slot}_scale"] == ("F32", [], struct.pack("<f", 1.0))
    assert run_shardload("load", vllm, "--checksum").returncode == 0


def test_sglang_names(tiny, tmp_path):
    model = tiny("deepseek_v3")
    plain = rank_tensors(export(model, tmp_path / "plain", "--tp", 2, "--ep", 2), 0)
    sglang = rank_tensors(export(model, tmp_path / "sglang", "--tp", 2, "--ep", 2, "--engine", "sglang"), 0)
    fused = "model.layers.1.self_attn.fused_qkv_a_proj.weight"
    assert sglang[fused.replace("fused_qkv_a_proj", "fused_qkv_a_proj_with_mqa")] == plain[fused]
    assert set(sglang) == {n.replace("fused_qkv_a_proj", "fused_qkv_a_proj_with_mqa") for n in plain}


def test_fastdeploy_is_the_layout_recorded(tiny, tmp_path):
    model = tiny("qwen3_moe")
    plain = export(model, tmp_path / "plain", "--tp", 2, "--ep", 2, "--row-bias", "divided")
    fastdeploy = export(model, tmp_path / "fd", "--tp", 2, "--ep", 2, "--row-bias", "divided", "--engine",
                        "fastdeploy")
    for rank in range(2):
        assert rank_tensors(plain, rank) == rank_tensors(fastdeploy, rank)
    assert metadata(fastdeploy, 0)["engine"] == "fastdeploy"
    assert sorted(shardload.load_export(fastdeploy)) == [0, 1]


def test_python_api_engine(tiny, tmp_path):
    shardload.export(tiny("llama"), tmp_path / "api", tp=2, engine="vllm")
    assert rank_tensors(tmp_path / "api", 0) == rank_tensors(
        export(tiny("llama"), tmp_path / "cli", "--tp", 2, "--engine", "vllm"), 0)
    with pytest.raises(shardload.Error, match="engine"):
        shardload.export(tiny("llama"), tmp_path / "bad", tp=2, engine="tensorrt")


def f32_of_bf16(blob):
    """bfloat16 values widened to float32 (exact), as bytes."""
    return b"".join(b"\0\0" + blob[i:i + 2] for i in range(0, len(blob), 2))


def test_vllm_rows_of_the_later_families(tiny, tmp_path):
    """vLLM's DeepSeek-V3.2 holds the indexer's wk and weights_proj as one tensor (wk's rows first) and its
    k_norm in float32; GLM-4-MoE's router float32 with the score-correction bias among the routed experts;
    gpt-oss's embedding and attention under vLLM's own names. (tests/engines/ has vLLM load them.)"""
    v32 = tiny("deepseek_v32")
    plain, vllm = (rank_tensors(export(v32, tmp_path / name, "--tp", 2, "--ep", 2, *flags), 1)
                   for name, flags in (("plain", []), ("vllm", ["--engine", "vllm"])))
    prefix = "model.layers.0.self_attn.indexer."
    wk, weights_proj = plain[prefix + "wk.weight"], plain[prefix + "weights_proj.weight"]
    fused = vllm[prefix + "wk_weights_proj.weight"]
    assert fused == ("BF16", [wk[1][0] + weights_proj[1][0], wk[1][1]], wk[2] + weights_proj[2])
    assert prefix + "wk.weight" not in vllm and prefix + "weights_proj.weight" not in vllm
    for part in ("weight", "bias"):
        norm = plain[f"{prefix}k_norm.{part}"]
        assert norm[0] == "BF16" and vllm[f"{prefix}k_norm.{part}"] == ("F32", norm[1], f32_of_bf16(norm[2]))
    glm = tiny("glm4_moe")
    plain, vllm = (rank_tensors(export(glm, tmp_path / f"glm-{name}", "--tp", 2, "--ep", 2, *flags), 0)
                   for name, flags in (("plain", []), ("vllm", ["--engine", "vllm"])))
    gate = plain["model.layers.1.mlp.gate.weight"]  # float32 in shardload's layout too (docs/layout.md's GLM rows)
    assert gate[0] == "F32" and vllm["model.layers.1.mlp.gate.weight"] == gate
    assert (vllm["model.layers.1.mlp.experts.routed_experts.e_score_correction_bias"]
            == plain["model.layers.1.mlp.gate.e_score_correction_bias"])
    oss = rank_tensors(export(tiny("gpt_oss"), tmp_path / "oss", "--tp", 2, "--ep", 2, "--engine", "vllm"), 0)
    assert "model.embedding.weight" in oss and "model.layers.0.attn.qkv_proj.weight" in oss
    assert {n for n in oss if n.startswith("model.layers.0.attn.attn.")} == {
        f"model.layers.0.attn.attn._{s}_scale" for s in ("k", "v", "q", "prob")}
    # Gemma 4: vLLM holds the layers on an earlier layer's KV cache (make-tiny's 4 and 5) under its
    # You-Only-Cache-Once cross decoder (the smaller of their two names), with q_proj alone; the experts
    # under routed_experts, the router beside them.
    gemma = rank_tensors(export(tiny("gemma4"), tmp_path / "gemma", "--tp", 2, "--ep", 2, "--engine", "vllm"), 0)
    assert not any(n.startswith(("model.layers.4.", "model.layers.5.")) for n in gemma)
    cross = "model.cross_decoder.decoder_layers.1."
    assert {cross + "self_attn.q_proj.weight", cross + "self_attn.attn._k_scale", cross + "router.proj.weight",
            cross + "experts.routed_experts.w13_weight"} <= gemma.keys()
    assert not any(n.startswith(cross + "self_attn.") and "k_proj" in n or "qkv_proj" in n and n.startswith(cross)
                   for n in gemma)
    assert "model.layers.3.self_attn.qkv_proj.weight" in gemma


@pytest.mark.parametrize("arch,quant,flags,words", [
    ("qwen3_moe", "none", ["--tp", 2, "--ep", 2, "--engine", "sglang"], ["qwen3_moe", "dense layers"]),
    ("gpt_oss", "none", ["--tp", 2, "--engine", "sglang"], ["gpt_oss", "llama, qwen2", "expert parallelism"]),
    ("llama4", "none", ["--tp", 2, "--engine", "sglang"], ["llama4", "interleaved order"]),
    # SGLang 0.5.23 cannot read Gemma 4's per-layer geometry (docs/engines.md)
    ("gemma4", "none", ["--tp", 2, "--ep", 2, "--engine", "sglang"], ["gemma4", "global_head_dim"]),
    # SGLang 0.5.23's DeepSeek-V4 load needs an NVIDIA GPU and holds another layout (docs/engines.md)
    ("deepseek_v4", "none", ["--tp", 2, "--ep", 2, "--engine", "sglang"], ["deepseek_v4", "mHC kernels"]),
    # the seven families vLLM takes since issue 48: unquantized (and gpt-oss's MXFP4) only
    ("glm4_moe", "fp8", ["--tp", 2, "--ep", 2, "--engine", "vllm"], ["quantization format of glm4_moe", "unquantized"]),
    # vLLM 0.33's gpt-oss divides the KV heads by tp without replicating them: make-tiny's 2 at tp 4 is none
    ("gpt_oss", "mxfp4", ["--tp", 4, "--ep", 4, "--engine", "vllm"], ["gpt_oss at tp 4 over 2 KV heads", "tp 4"]),
    ("llama", "fp8", ["--tp", 2, "--engine", "sglang"], ["sharded_state", "--engine-post-processed", "fp8"]),
    # --engine-post-processed: SGLang's, for the FP8 formats its hooks take
    ("llama", "fp8", ["--tp", 2, "--engine", "vllm", "--engine-post-processed"], ["SGLang", "vllm"]),
    ("llama", "fp8", ["--tp", 2, "--engine-post-processed"], ["SGLang", "none"]),
    ("llama", "none", ["--tp", 2, "--engine", "sglang", "--engine-post-processed"], ["FP8 checkpoint", "none"]),
    ("llama", "fp8-block", ["--tp", 2, "--engine", "sglang", "--engine-post-processed"],
     ["quantization format of llama", "fp8-block"]),
    ("deepseek_v3", "fp8", ["--tp", 2, "--ep", 2, "--engine", "sglang"], ["quantization format of deepseek_v3"]),
    ("llama", "fp8-block", ["--tp", 2, "--engine", "sglang"], ["quantization format of llama", "fp8-block"]),
    ("deepseek_v3", "fp8-block", ["--tp", 2, "--ep", 2, "--engine", "sglang"], ["sharded_state", "fp8-block"]),
    ("deepseek_v3", "ct-fp8-tensor", ["--tp", 2, "--ep", 2, "--engine", "sglang"],
     ["quantization format of deepseek_v3", "compressed-tensors tensor", "fp8-block, compressed-tensors block"]),
    ("llama", "none", ["--tp", 2, "--quantization", "fp8", "--engine", "vllm"], ["quantization format", "fp8-dynamic"]),
    # W8A8 int8 and NVFP4: SGLang's hooks take them as loaded; its sharded_state reads them post-processed.
    ("llama", "ct-w8a8", ["--tp", 2, "--engine", "sglang"], ["sharded_state", "as loaded", "found int8"]),
    ("llama", "ct-w8a8", ["--tp", 2, "--engine", "sglang", "--engine-post-processed"], ["FP8 checkpoint"]),
    # Packed integer weights: checked against vLLM's loaders only; SGLang's not yet.
    ("llama", "ct-w4a16", ["--tp", 2, "--engine", "sglang"],
     ["quantization format of llama", "found compressed-tensors pack-quantized"]),
    ("qwen2", "ct-w4a16", ["--tp", 1, "--engine", "vllm"], ["quantization format of qwen2", "pack-quantized"]),
    ("llama", "none", ["--tp", 2, "--row-bias", "divided", "--engine", "sglang"], ["--row-bias divided"]),
    ("llama", "none", ["--tp", 2, "--dp", 2, "--engine", "vllm"], ["--dp 2"]),
    ("llama", "none", ["--tp", 2, "--engine", "tensorrt"], ["--engine"]),
    ("qwen3_moe", "none", ["--tp", 2, "--ep", 2, "--redundant-experts", 2, "--engine", "vllm"],
     ["redundant experts"]),
    ("qwen3_moe", "none", ["--tp", 2, "--ep", 2, "--expert-map", "MAP", "--engine", "vllm"],
     ["expert map", "logical expert 1"]),
])
def test_what_an_engine_cannot_take_is_refused(tiny, tmp_path, arch, quant, flags, words):
    if "MAP" in flags:  # experts 0 and 1 swapped in every MoE layer (make-tiny's Qwen3-MoE: 3 of 8 experts)
        (tmp_path / "map.json").write_text(json.dumps({"physical_to_logical_map": [[1, 0, 2, 3, 4, 5, 6, 7]] * 3}))
        flags = [str(tmp_path / "map.json") if f == "MAP" else f for f in flags]
    done = run_shardload("export", tiny(arch, quant), "--out", tmp_path / "out", *flags, check=False)
    assert done.returncode != 0
    for word in words:
        assert word in done.stderr, (word, done.stderr)
    assert not (tmp_path / "out").exists()


def floats(blob):
    return [v for (v,) in struct.iter_unpack("<f", blob)]


def test_sglang_post_processed_fp8(tiny, tmp_path):
    """`export --engine sglang --engine-post-processed` of static per-tensor FP8: the FP8 layers as SGLang's
    post-processing leaves them on an NVIDIA GPU with FP8 (tests/engines/ has SGLang's sharded_state read
    them): dense weights transposed, the merged weight scale on every row ([out, 1]), one input scale [];
    experts' codes as they are, one weight scale per expert (w13's largest) and one input scale [] (the
    largest); the KV-cache slots at 1 (what the post-processing makes of unset ones). Recorded in the manifest
    and every rank file, which load_export checks."""
    model = tiny("qwen2_moe", "fp8")
    flags = ["--tp", 2, "--ep", 2, "--engine", "sglang"]
    plain = export(model, tmp_path / "plain", "--tp", 2, "--ep", 2)
    post = export(model, tmp_path / "post", *flags, "--engine-post-processed")
    assert json.loads((pathlib.Path(post) / "shardload.json").read_text())["engine_post_processed"] is True
    assert metadata(post, 1)["engine_post_processed"] == "true"
    for rank in range(2):
        a, b = rank_tensors(plain, rank), rank_tensors(post, rank)
        layer = "model.layers.0."
        for proj in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.shared_expert.gate_up_proj"):
            dtype, (rows, cols), codes = a[f"{layer}{proj}.weight"]
            transposed = bytes(codes[r * cols + c] for c in range(cols) for r in range(rows))
            assert b[f"{layer}{proj}.weight"] == (dtype, [cols, rows], transposed), proj
            assert b[f"{layer}{proj}.weight_scale"] == ("F32", [rows, 1], a[f"{layer}{proj}.weight_scale"][2] * rows)
            assert b[f"{layer}{proj}.input_scale"] == ("F32", [], a[f"{layer}{proj}.input_scale"][2])
        experts = layer + "mlp.experts."
        assert b[experts + "w13_weight"] == a[experts + "w13_weight"]
        w13 = floats(a[experts + "w13_weight_scale"][2])
        assert b[experts + "w13_weight_scale"] == ("F32", [len(w13) // 2],
                                                   struct.pack(f"<{len(w13) // 2}f", *map(max, w13[::2], w13[1::2])))
        assert b[experts + "w2_weight_scale"] == a[experts + "w2_weight_scale"]
        for scale in ("w13_input_scale", "w2_input_scale"):
            assert b[experts + scale] == ("F32", [], struct.pack("<f", max(floats(a[experts + scale][2])))), scale
        for slot in ("k_scale", "v_scale"):
            assert b[f"{layer}self_attn.attn.{slot}"] == ("F32", [], struct.pack("<f", 1.0)), slot
    assert run_shardload("load", post, "--checksum").returncode == 0
    api = shardload.export(model, tmp_path / "api", tp=2, ep=2, engine="sglang", engine_post_processed=True)
    assert all(rank_tensors(api["out"], r) == rank_tensors(post, r) for r in range(2))
    # The flag edited out of the manifest (the files still record it), or onto another engine's export.
    edit_manifest(post, lambda m: m.pop("engine_post_processed"))
    assert run_shardload("load", post, check=False).returncode == 1
    vllm = export(model, tmp_path / "vllm", "--tp", 2, "--ep", 2, "--engine", "vllm")
    edit_manifest(vllm, lambda m: m.update(engine_post_processed=True))
    done = run_shardload("load", vllm, check=False)
    assert done.returncode == 1 and "engine_post_processed" in done.stderr, done.stderr


@pytest.mark.parametrize("arch,quant,flags,proj,transposed,scale_shape", [
    ("qwen2", "ct-fp8-tensor", ["--tp", 2], "self_attn.qkv_proj", True, []),  # one scale (requantized)
    ("llama", "ct-fp8-channel", ["--tp", 2], "mlp.gate_up_proj", True, None),  # per row, as loaded
    ("deepseek_v3", "fp8-block", ["--tp", 2, "--ep", 2], "self_attn.o_proj", False, None),  # as loaded
])
def test_sglang_post_processed_formats(tiny, tmp_path, arch, quant, flags, proj, transposed, scale_shape):
    """The other formats SGLang's hooks take, post-processed: compressed-tensors' per-tensor scale reduced to
    one [], per-channel weights transposed with their [out, 1] scales, block formats as loaded."""
    model = tiny(arch, quant)
    plain = rank_tensors(export(model, tmp_path / "plain", *flags), 1)
    post = rank_tensors(export(model, tmp_path / "post", *flags, "--engine", "sglang", "--engine-post-processed"), 1)
    weight = f"model.layers.1.{proj}.weight"
    dtype, (rows, cols), codes = plain[weight]
    if transposed:
        codes = bytes(codes[r * cols + c] for c in range(cols) for r in range(rows))
    assert post[weight] == (dtype, [cols, rows] if transposed else [rows, cols], codes)
    scale = weight + ("_scale_inv" if quant == "fp8-block" else "_scale")
    want = plain[scale] if scale_shape is None else (plain[scale][0], scale_shape, plain[scale][2])
    assert post[scale] == want


def edit_manifest(out, edit):
    path = pathlib.Path(out) / "shardload.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("edit,words", [
    (lambda m: m.pop("engine"), ["engine", "nothing"]),             # the files still say vllm
    (lambda m: m.update(engine="sglang"), ["engine", "sglang"]),     # another engine's names
    (lambda m: m.update(engine="tensorrt"), ["engine", "tensorrt"]),  # not an engine
])
def test_an_edited_engine_is_refused(tiny, tmp_path, edit, words):
    out = export(tiny("llama"), tmp_path / "out", "--tp", 2, "--engine", "vllm")
    edit_manifest(out, edit)
    done = run_shardload("load", out, check=False)
    assert done.returncode == 1
    with pytest.raises(shardload.Error) as error:
        shardload.load_export(out)
    for word in words:
        assert word in done.stderr and word in str(error.value), (word, done.stderr)


def test_verify_refuses_an_engine_export(tiny, tmp_path):
    import subprocess
    import sys

    out = export(tiny("llama"), tmp_path / "out", "--tp", 2, "--engine", "vllm")
    done = subprocess.run([sys.executable, "-m", "shardload.verify", tiny("llama"), "--export", out],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "engine" in done.stderr, done.stderr


# The engine hooks (shardload.vllm) fill an engine's model from a rank's engine layout; tests/engines/ runs
# them inside vLLM. Here: the layout is what `export --engine` writes, and a fill checks before it copies.

@pytest.mark.parametrize("arch,quant,engine,flags", [("qwen3", "none", "vllm", {"tp": 2}),
                                                      ("deepseek_v3", "none", "vllm", {"tp": 2, "ep": 2}),
                                                      ("qwen3_moe", "fp8", "vllm", {"tp": 2, "ep": 2}),
                                                      ("deepseek_v3", "fp8-block", "vllm", {"tp": 2, "ep": 2}),
                                                      ("qwen3_moe", "ct-fp8-tensor", "vllm", {"tp": 2, "ep": 2}),
                                                      ("qwen2_moe", "none", "sglang", {"tp": 2, "ep": 2})])
def test_engine_layout_is_what_the_export_holds(tiny, tmp_path, arch, quant, engine, flags):
    model = tiny(arch, quant)
    out = export(model, tmp_path / "out", *sum((["--" + k, v] for k, v in flags.items()), []), "--engine", engine)
    plain = export(model, tmp_path / "plain", *sum((["--" + k, v] for k, v in flags.items()), []))
    for rank in range(flags["tp"]):
        entries = shardload.engines.engine_layout(model, rank=rank, engine=engine, **flags)
        held, layout = rank_tensors(out, rank), rank_tensors(plain, rank)
        assert sorted(e["name"] for e in entries) == sorted(held)
        for e in entries:
            dtype, shape, _ = held[e["name"]]
            assert (e["dtype"], e["shape"]) == (dtype, shape), e["name"]
            # Buffers: vLLM's attention scales, float32 1 (_k_scale, ...) and FP8's KV-cache slots, -1
            # (compressed-tensors': scales 1, zero points 0).
            buffer = re.search(r"attn\.(_?)(k|v|q|prob)_(scale|zero_point)$", e["name"])
            assert (e["source"] is None) == bool(buffer), e["name"]
            if buffer:
                compressed = quant.startswith("ct-")
                expected = (1.0 if buffer.group(1) or compressed else -1.0) if buffer.group(3) == "scale" else 0.0
                assert e["fill"] == expected, e["name"]
                continue
            assert e["source_shape"] == layout[e["source"]][1], e["name"]
            if e["source_shape"] != e["shape"]:  # the engines' FP8 scale per fused part: the merged one, repeated
                assert e["source_shape"] == [1] and e["name"].endswith("_scale"), e["name"]


def test_engine_layout_refuses_what_the_engine_cannot_take(tiny):
    with pytest.raises(shardload.InvalidArgumentError, match="quantization format of deepseek_v3"):
        shardload.engines.engine_layout(tiny("deepseek_v3", "fp8"), rank=0, engine="sglang", tp=2, ep=2)
    # SGLang's FP8 export is refused (its sharded_state reads post-processed layers); its hooks take FP8.
    assert shardload.engines.engine_layout(tiny("llama", "fp8"), rank=0, engine="sglang", tp=2)
    with pytest.raises(shardload.InvalidArgumentError, match="rank"):
        shardload.engines.engine_layout(tiny("llama"), rank=2, engine="vllm", tp=2)


def test_a_fill_names_every_mismatch_and_copies_nothing(tiny):
    torch = pytest.importorskip("torch")
    model = tiny("qwen3")
    entries = shardload.engines.engine_layout(model, rank=1, engine="vllm", tp=2)
    loaded = shardload.load(model, ranks=[1], tp=2)

    def module(skip=(), shapes=None):
        return engine_module(torch, entries, skip, shapes)

    good = module()
    shardload.engines.fill_from_tensors(good, entries, loaded.tensors(1))
    state = good.state_dict()
    sources = {k: shardload.to_torch(v) for k, v in loaded.tensors(1).items()}
    for e in entries:
        want = sources[e["source"]].to(state[e["name"]].dtype) if e["source"] else torch.tensor(e["fill"])
        assert torch.equal(state[e["name"]], want), e["name"]
    norm = next(e["name"] for e in entries if e["name"].endswith("q_norm.weight"))
    assert state[norm].dtype == torch.bfloat16  # vLLM's q/k norms: the model dtype, not layout.md's float32

    head = "lm_head.weight"
    bad = module(skip={norm}, shapes={head: (3, 3)})
    with pytest.raises(shardload.InvalidArgumentError) as error:
        shardload.engines.fill_from_tensors(bad, entries, loaded.tensors(1))
    assert norm in str(error.value) and head in str(error.value)
    assert all(not t.any() for t in bad.state_dict().values())  # nothing copied


def test_a_refill_refuses_parameters_the_engine_replaced(tiny):
    """After a fill the engine's post-processing may replace parameters (repacked, requantized); a refill
    (RL sync) would write unprocessed bytes into them, so it is refused, naming them."""
    torch = pytest.importorskip("torch")
    model = tiny("llama")
    entries = shardload.engines.engine_layout(model, rank=0, engine="vllm", tp=2)
    root = engine_module(torch, entries)
    shardload.engines.fill_rank(root, model, 0, {"tp": 2}, "vllm")
    shardload.engines.fill_rank(root, model, 0, {"tp": 2}, "vllm")  # nothing replaced: a refill goes on
    parent = root.model.layers.get_submodule("0").self_attn.qkv_proj
    parent.weight = parent.weight.clone()  # as a post-processing that makes a new tensor
    with pytest.raises(shardload.ConflictError, match="replaced 1 parameter") as error:
        shardload.engines.fill_rank(root, model, 0, {"tp": 2}, "vllm")
    assert "model.layers.0.self_attn.qkv_proj.weight" in str(error.value)
