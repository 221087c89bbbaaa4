"""shardload.load_export takes an export only when each rank file holds what the export's own layout plans
(its config.json planned with shardload.json) and records the layout shardload.json gives: a rank file of
another export, a dropped, extra, reshaped or recast tensor and shardload.json edits the tensors do not show
raise a typed error naming what differs, as `shardload load` exits 1."""
import json
import pathlib
import shutil

import pytest

import shardload
from conftest import run_shardload


def rank_file(out, rank):
    return pathlib.Path(out) / f"model-rank-{rank}-part-0.safetensors"


def read_raw(path):
    """(header dict without __metadata__, metadata, {name: bytes}) of a safetensors file, read directly."""
    data = pathlib.Path(path).read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    base = 8 + length
    blobs = {name: data[base + e["data_offsets"][0]:base + e["data_offsets"][1]] for name, e in header.items()}
    return header, metadata, blobs


def write_raw(path, header, metadata, blobs):
    """A valid safetensors file of `header`'s tensors (dtype, shape) with `blobs`' bytes, in name order."""
    entries, offset, data = {}, 0, b""
    for name in sorted(header):
        entries[name] = {"dtype": header[name]["dtype"], "shape": header[name]["shape"],
                         "data_offsets": [offset, offset + len(blobs[name])]}
        data += blobs[name]
        offset += len(blobs[name])
    entries["__metadata__"] = metadata
    text = json.dumps(entries).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(path).write_bytes(len(text).to_bytes(8, "little") + text + data)


def rewrite(path, edit):
    header, metadata, blobs = read_raw(path)
    edit(header, blobs)
    write_raw(path, header, metadata, blobs)


def refused(out, *words):
    """Both load_export and `shardload load` refuse the export naming each word; the Python error."""
    cli = run_shardload("load", out, check=False)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    with pytest.raises(shardload.Error) as error:
        shardload.load_export(out)
    for word in words:
        assert word in cli.stderr, (word, cli.stderr)
        assert word in str(error.value), (word, str(error.value))
    return error.value


NORM = "model.layers.1.input_layernorm.weight"
QKV = "model.layers.1.self_attn.qkv_proj.weight"


@pytest.fixture
def export(tiny, tmp_path):
    """A qwen3_moe export (8 experts) at tp 4 x ep 2."""
    out = tmp_path / "out"
    shardload.export(tiny("qwen3_moe"), out, tp=4, ep=2)
    return str(out)


def test_untouched_export_loads(export):
    assert sorted(shardload.load_export(export)) == [0, 1, 2, 3]
    assert run_shardload("load", export).returncode == 0


def test_rank_file_of_a_16_expert_export_is_refused(export, tmp_path):
    model16 = tmp_path / "model16"
    run_shardload("make-tiny", "--arch", "qwen3_moe", "--experts", 16, "--seed", 7, "--out", model16)
    shardload.export(model16, tmp_path / "out16", tp=4, ep=2)
    shutil.copyfile(rank_file(tmp_path / "out16", 1), rank_file(export, 1))
    error = refused(export, "model-rank-1-part-0.safetensors", "physical_to_logical_map")
    assert error.kind == "invalid_metadata"
    assert sorted(shardload.load_export(export, ranks=[0])) == [0]


def test_dropped_tensor_is_refused(export):
    rewrite(rank_file(export, 2), lambda header, blobs: header.pop(NORM))
    error = refused(export, "model-rank-2-part-0.safetensors", NORM, "missing")
    assert isinstance(error, shardload.ConfigError) and error.tensor == NORM


def test_extra_tensor_is_refused(export):
    def add(header, blobs):
        header["model.layers.1.extra_norm.weight"] = dict(header[NORM])
        blobs["model.layers.1.extra_norm.weight"] = blobs[NORM]

    rewrite(rank_file(export, 0), add)
    assert refused(export, "model.layers.1.extra_norm.weight").kind == "unknown_tensor"


def test_changed_shape_is_refused(export):
    def reshape(header, blobs):
        rows, cols = header[QKV]["shape"]
        header[QKV]["shape"] = [rows * 2, cols // 2]

    rewrite(rank_file(export, 1), reshape)
    error = refused(export, "model-rank-1-part-0.safetensors", QKV)
    assert error.kind == "shape_mismatch" and error.field == "shape" and error.expected != error.found


def test_changed_dtype_is_refused(export):
    rewrite(rank_file(export, 3), lambda header, blobs: header[NORM].update(dtype="F16"))
    error = refused(export, NORM)
    assert (error.expected, error.found) == ("BF16", "F16")


@pytest.mark.parametrize("field,edit", [
    ("quantization", lambda m: m.update(quantization="fp8-dynamic")),
    ("redundant_experts", lambda m: m.update(redundant_experts=2)),
    ("physical_to_logical_map", lambda m: m["physical_to_logical_map"][0].reverse()),
])
def test_manifest_edits_are_refused(export, field, edit):
    path = pathlib.Path(export) / "shardload.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    error = refused(export, "model-rank-0-part-0.safetensors", field)
    assert error.kind == "invalid_metadata"
