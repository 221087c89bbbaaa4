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


def test_a_server_without_gpu_ranks_has_no_cuda_tensors(tiny, tmp_path):
    from test_client import Server, remove_shm, unique_name
    name = unique_name("nocuda")
    server = Server(tiny("qwen3_moe"), name, [], tmp_path)
    try:
        with shardload.connect(name) as client:
            assert "cuda" not in client.manifest
            with pytest.raises(shardload.InvalidArgumentError, match="--device cuda"):
                client.cuda_tensors(0)
    finally:
        server.kill()
        remove_shm(name)


@pytest.mark.skipif(not NO_GPU, reason="a GPU is usable here")
def test_serve_device_cuda_without_a_gpu_exits_1(tiny):
    from conftest import run_shardload
    r = run_shardload("serve", tiny("llama"), "--name", "nogpu", "--port", "0", "--device", "cuda", check=False)
    assert r.returncode == 1 and "--device cuda: " in r.stderr


@gpu
@torch_cuda
def test_client_maps_the_servers_gpu_ranks_and_sees_updates_in_place(tiny, tmp_path):
    from test_client import Server, remove_shm, unique_name
    name = unique_name("cuda")
    first, second = tiny("qwen3_moe", seed=41), tiny("qwen3_moe", seed=42)
    server = Server(first, name, ["--device", "cuda", "--device-map", "0,0"], tmp_path)
    try:
        with shardload.connect(name) as client:
            assert client.manifest["cuda"]["format"] == "shardload-cuda-ipc/1"
            for rank in range(client.ranks):
                gpu = client.cuda_tensors(rank)
                host = client.tensors(rank)
                assert set(gpu) == set(host)
                for n, t in gpu.items():
                    assert t.is_cuda and torch.equal(t.cpu(), host[n]), n
            before = client.cuda_tensors(0)
            pointers = {n: t.data_ptr() for n, t in before.items()}
            server.update(second)
            client.refresh()
            after = client.tensors(0)
            for n, t in before.items():  # the same CUDA tensors, new bytes
                assert t.data_ptr() == pointers[n]
                assert torch.equal(t.cpu(), after[n]), n
    finally:
        server.kill()
        remove_shm(name)
