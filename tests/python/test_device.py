"""device="cuda": rank tensors in GPU memory as CUDA DLPack tensors. Without a usable GPU (every CI
machine) a device load is a DeviceError naming the reason; with one, each tensor says kDLCUDA and,
where torch has CUDA, torch.from_dlpack gives CUDA tensors equal to the host load's. The torch here
is CPU-only: those checks skip with the reason (bench/gpu/run_device_checks.sh runs them on a GPU)."""
import pytest
import torch

import shardload

NO_GPU = shardload.cuda_unavailable_reason()
gpu = pytest.mark.skipif(bool(NO_GPU), reason=f"needs a GPU: {NO_GPU}")
torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs torch with CUDA (this torch is CPU-only or sees no GPU)")


def test_cpu_tensors_say_cpu(tiny):
    loaded = shardload.load(tiny("qwen3_moe"), tp=2, device="cpu")
    assert loaded.device == "cpu" and loaded.devices == {}
    t = loaded.tensors(0)["model.norm.weight"]
    assert t.__dlpack_device__() == (1, 0) and t.device == "cpu"


def test_bad_device_arguments_are_invalid_argument(tiny):
    with pytest.raises(shardload.InvalidArgumentError, match="cpu or cuda"):
        shardload.load(tiny("llama"), device="tpu")
    with pytest.raises(shardload.InvalidArgumentError, match="device_map"):
        shardload.load(tiny("llama"), device_map=[0])


@pytest.mark.skipif(not NO_GPU, reason="a GPU is usable here")
def test_cuda_without_a_gpu_is_a_device_error(tiny):
    with pytest.raises(shardload.DeviceError) as info:
        shardload.load(tiny("llama"), device="cuda")
    assert info.value.kind == "device"
    assert NO_GPU in str(info.value)


@gpu
def test_device_ranks_are_cuda_dlpack_tensors(tiny):
    loaded = shardload.load(tiny("qwen3_moe", "fp8"), tp=4, ep=2, device="cuda", device_map=[0, 0, 0, 0])
    assert loaded.device == "cuda" and loaded.devices == {0: 0, 1: 0, 2: 0, 3: 0}
    for name, t in loaded.tensors(3).items():
        assert t.__dlpack_device__() == (2, 0), name
        assert t.device == "cuda:0"


@gpu
@torch_cuda
def test_torch_from_dlpack_gives_cuda_tensors_equal_to_the_host_load(tiny):
    model = tiny("deepseek_v3", "fp8-block")
    host = shardload.load(model, tp=4, ep=2)
    dev = shardload.load(model, tp=4, ep=2, device="cuda", device_map=[0, 0, 0, 0])
    for rank in host.ranks:
        want = host.tensors(rank)
        for name, t in dev.tensors(rank).items():
            g = torch.from_dlpack(t)
            assert g.is_cuda
            assert torch.equal(g.cpu(), torch.from_dlpack(want[name])), name
