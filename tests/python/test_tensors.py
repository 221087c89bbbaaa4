"""Rank tensors through DLPack: for every family at tp 2 x ep 2 (tp 2 for dense), what torch.from_dlpack
and numpy.from_dlpack see is byte for byte what `shardload load --checksum` prints and what the export
holds, shares memory with the rank buffer, and stays valid after every shardload object is gone."""
import ctypes
import gc

import numpy
import pytest
import torch

import shardload
from conftest import read_safetensors, run_shardload

FAMILIES = ["llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3",
            "deepseek_v32", "ernie4_5_moe", "glm4_moe", "minimax_m2", "qwen3_next", "llama4",
            "glm4_moe_lite", "glm_moe_dsa", "qwen3_5", "qwen3_5_moe", "gemma4", "kimi_k25"]
DENSE = {"llama", "qwen2", "qwen3", "qwen3_5"}

_xxh3 = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
_xxh3.restype, _xxh3.argtypes = ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_size_t]


def xxh3_hex(t: torch.Tensor) -> str:
    return f"{_xxh3(t.data_ptr(), t.numel() * t.element_size()):016x}"


def layout(arch):
    return {"tp": 2} if arch in DENSE else {"tp": 2, "ep": 2}


def flags(kw):
    return [a for k, v in kw.items() for a in (f"--{k}", str(v))]


def checksums(model, kw):
    """{(rank, name): (dtype, shape, xxh3)} from `shardload load --checksum`."""
    out = {}
    for line in run_shardload("load", model, *flags(kw), "--checksum").stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 5:
            out[(int(parts[0]), parts[1])] = (parts[2], parts[3], parts[4])
    return out


@pytest.mark.parametrize("arch", FAMILIES)
def test_dlpack_tensors_equal_the_checksums_and_the_export(arch, tiny, tmp_path):
    model = tiny(arch)
    kw = layout(arch)
    expected = checksums(model, kw)
    run_shardload("export", model, *flags(kw), "--out", tmp_path / "out")
    loaded = shardload.load(model, **kw)
    seen = 0
    for rank in loaded.ranks:
        exported = {}
        for f in sorted((tmp_path / "out").glob(f"model-rank-{rank}-part-*.safetensors")):
            exported.update(read_safetensors(f))
        for name, tensor in loaded.tensors(rank).items():
            t = torch.from_dlpack(tensor)
            assert t.data_ptr() == tensor.data_ptr, f"{name}: a copy, not the rank buffer"
            dtype, shape, digest = expected[(rank, name)]
            assert (tensor.dtype, "[" + ",".join(map(str, tensor.shape)) + "]") == (dtype, shape)
            assert xxh3_hex(t) == digest, f"rank {rank} {name}"
            ex_dtype, ex_shape, ex_bytes = exported[name]
            assert (ex_dtype, list(ex_shape)) == (tensor.dtype, list(tensor.shape))
            raw = t.reshape(-1).view(torch.uint8) if t.element_size() > 1 else t.reshape(-1)
            assert raw.numpy().tobytes() == ex_bytes, f"rank {rank} {name} differs from the export"
            seen += 1
    assert seen == len(expected)


def test_numpy_shares_memory_and_refuses_bfloat16_clearly(tiny):
    loaded = shardload.load(tiny("qwen3_moe"), tp=2, ep=2, dtype="float32")
    norm = loaded.tensors(0)["model.norm.weight"]
    a = numpy.from_dlpack(norm)
    assert a.dtype == numpy.float32 and a.ctypes.data == norm.data_ptr
    b = shardload.to_numpy(norm)  # NumPy marks DLPack arrays read-only; torch writes through
    torch.from_dlpack(norm)[0] = 42.0  # the same bytes: writes show through every view
    assert a[0] == 42.0 and b[0] == 42.0

    bf16 = shardload.load(tiny("qwen3_moe"), tp=2, ep=2).tensors(0)["model.norm.weight"]
    with pytest.raises(shardload.InvalidArgumentError, match="NumPy has no bfloat16") as error:
        shardload.to_numpy(bf16)
    assert error.value.tensor == "model.norm.weight" and error.value.found == "BF16"
    bits = shardload.to_numpy(bf16, bits=True)
    assert bits.dtype == numpy.uint16
    assert numpy.array_equal(bits, torch.from_dlpack(bf16).view(torch.int16).numpy().view(numpy.uint16))
    assert torch.from_dlpack(bf16).dtype == torch.bfloat16


def test_fp8_is_uint8_with_its_dtype_name(tiny):
    loaded = shardload.load(tiny("qwen3_moe", "fp8"), tp=2, ep=2)
    tensors = loaded.tensors(1)
    w13 = tensors["model.layers.1.mlp.experts.w13_weight"]
    assert w13.dtype == "F8_E4M3"
    t = shardload.to_torch(w13)
    assert t.dtype == torch.uint8 and t.shardload_dtype == "F8_E4M3"
    assert torch.from_dlpack(tensors["model.layers.1.mlp.experts.w13_weight_scale"]).dtype == torch.float32
    if hasattr(torch, "float8_e4m3fn"):
        assert shardload.as_float8(t).dtype == torch.float8_e4m3fn
    else:
        with pytest.raises(shardload.InvalidArgumentError, match="has no float8_e4m3fn"):
            shardload.as_float8(t)


def test_memory_outlives_every_shardload_object(tiny):
    loaded = shardload.load(tiny("qwen3_moe"), tp=2, ep=2)
    tensor = loaded.tensors(0)["model.layers.0.self_attn.qkv_proj.weight"]
    t = torch.from_dlpack(tensor)
    a = numpy.from_dlpack(tensor.reinterpret("U16"))
    before = t.clone()
    capsule = tensor.__dlpack__()  # an unconsumed capsule owns a reference too
    del loaded, tensor
    gc.collect()
    garbage = [torch.ones(1 << 20) for _ in range(8)]  # reuse of freed memory would overwrite it
    assert torch.equal(t, before)
    assert numpy.array_equal(a, before.view(torch.int16).numpy().view(numpy.uint16))
    del capsule, garbage
    gc.collect()
    assert torch.equal(t, before)
