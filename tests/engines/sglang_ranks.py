"""SGLang's own parameters of a model, rank by rank, on CPU: T processes in a real gloo group, each
building SGLang's model class and filling it with SGLang's own loader (its default loader from the
Hugging Face checkpoint, or `sharded_state` from an export), then saving the rank's state dict as
SGLang's `save_sharded_state` sees it (tensors sharing storage reduced to one) to OUT/rank-R.safetensors.

Run by the engines' PyPI interpreter (SGLang installed with --no-deps over the vLLM environment):
  python sglang_ranks.py --tp T [--ep EP] MODEL:OUT:FORMAT... [--sync SYNC_JSON]
FORMAT: auto, sharded_state, sharded_state-gpu (sharded_state with SGLang's FP8 post-processing in the
branch it takes on an NVIDIA GPU with FP8, for `export --engine-post-processed`), shardload
(shardload.sglang.ShardloadLoader from the checkpoint) or server=NAME (the same loader from the weight
server NAME); the last two need the shardload package on PYTHONPATH. --sync {"port": P, "model": NEW,
"out": DIR}: rank 0 asks the weight server (port P) of the last server=NAME job to update to NEW, then every
rank runs shardload.sglang.sync_weights on that job's live model, as SGLang's update_weights_from_tensor runs
a --custom-weight-loader, and saves it to DIR.
PyNccl is off; sgl_kernel (SGLang's CUDA kernels, no CPU wheel on PyPI) and IPython (notebook display helpers
sglang.utils imports) are stand-in modules here: loading calls nothing of either.
"""
import argparse
import contextlib
import importlib.machinery
import json
import os
import sys

from rank_group import post, run_ranks, static_fp8_quant
import types

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
STUBBED = {"sgl_kernel", "IPython"}


class _StubModule(types.ModuleType):
    """Any attribute is another stub module: `from sgl_kernel import x` and `sgl_kernel.a.b` import."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub(f"{self.__name__}.{name}")


def _stub(name):
    module = _StubModule(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__version__ = "0.0.0"
    sys.modules[name] = module
    return module


class _StubFinder:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _stub(spec.name)

    def exec_module(self, module):
        pass


def rank_main(rank, args, port, errors):
    try:
        sys.meta_path.insert(0, _StubFinder())
        import torch

        torch.set_num_threads(1)
        from safetensors.torch import save_file
        from sglang.srt.configs.device_config import DeviceConfig
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
        from sglang.srt.model_loader import get_model
        from sglang.srt.model_loader.loader import ShardedStateLoader
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import ServerArgs

        def server_args(model, load_format):
            load_format = load_format.removesuffix("-gpu")
            extra = {}
            if load_format.startswith("server="):
                extra = {"weight_server": load_format[len("server="):]}
            return ServerArgs(model_path=model, tp_size=args.tp, ep_size=args.ep, device="cpu",
                              dtype=args.dtype,
                              load_format="auto" if extra or load_format == "shardload" else load_format,
                              skip_tokenizer_init=True, disable_cuda_graph=True,
                              model_loader_extra_config=json.dumps(extra),
                              custom_weight_loader=["shardload.sglang.sync_weights"] if extra else None)

        def load_config(load_format):
            if load_format == "shardload" or load_format.startswith("server="):
                import shardload.sglang

                extra = {"weight_server": load_format[len("server="):]} if load_format != "shardload" else {}
                return LoadConfig(load_format=shardload.sglang.ShardloadLoader, model_loader_extra_config=extra)
            return LoadConfig(load_format=load_format.removesuffix("-gpu"))

        def save(model, out, state=None):
            state = ShardedStateLoader._filter_subtensors(model.state_dict() if state is None else state)
            # DeepSeek's MLA holds w_kc / w_vc, derived from kv_b_proj after loading (post_load_weights),
            # as plain attributes outside the state dict: saved apart (OUT-derived), so that a stale one shows.
            derived = {f"{name}.{attr}": getattr(module, attr) for name, module in model.named_modules()
                       for attr in ("w_kc", "w_vc") if isinstance(getattr(module, attr, None), torch.Tensor)}
            if derived:
                os.makedirs(out + "-derived", exist_ok=True)
                save_file({k: v.detach().contiguous() for k, v in derived.items()},
                          os.path.join(out + "-derived", f"rank-{rank}.safetensors"))
            os.makedirs(out, exist_ok=True)
            save_file({k: v.detach().contiguous() for k, v in state.items()},
                      os.path.join(out, f"rank-{rank}.safetensors"))

        # SGLang's loaders post-process: FP8 modules are saved as loaded too, and as an NVIDIA GPU's
        # branch of the post-processing leaves them.
        loaded, on_gpu = fp8_stand_ins()

        publish(server_args(*args.jobs[0][::2]), role="scheduler", ranks=SpawnRanks(world_rank=rank))
        # PyNccl off: its communicator needs a CUDA device; gloo carries what loading exchanges.
        import sglang.srt.distributed.parallel_state as parallel_state

        make_group = parallel_state.init_model_parallel_group
        parallel_state.init_model_parallel_group = lambda *a, **k: make_group(
            *a, **{**k, "use_pynccl": False, "use_custom_allreduce": False})
        init_distributed_environment(world_size=args.tp, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}",
                                     backend="gloo")
        initialize_model_parallel()
        # The groups are made once; each job then publishes its own server arguments (the same
        # widths) and builds its model.
        live = None
        for model_dir, out, load_format in args.jobs:
            job_args = server_args(model_dir, load_format)
            publish(job_args, role="scheduler", ranks=SpawnRanks(world_rank=rank))
            loaded.clear()
            on_gpu.clear()
            with gpu_fp8_branch(load_format.endswith("-gpu")):
                model = get_model(model_config=ModelConfig.from_server_args(job_args),
                                  load_config=load_config(load_format), device_config=DeviceConfig("cpu"))
            if loaded:  # FP8: OUT as the weight loaders left it, OUT-post after SGLang's post-processing
                save(model, out, as_recorded(model, loaded))
                save(model, out + "-post")
                if on_gpu:  # OUT-gpu: the GPU branch's dense FP8 layers (its other modules: OUT-post's)
                    save(model, out + "-gpu", as_recorded(model, on_gpu))
            else:
                save(model, out)
            if load_format.startswith("server="):
                live = (model, job_args)
        if args.sync:
            sync(rank, args.sync, live, save, publish, SpawnRanks)
    except BaseException as e:  # the parent names the rank that failed
        import traceback

        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def fp8_stand_ins():
    """SGLang's FP8 post-processing on CPU, as its kernels compute it, with what its CUDA-less install
    lacks stood in: the static FP8 quantization (float32 x * (1 / scale), clamped to +-448, rounded to
    nearest even; sgl_kernel's op), the AMX check and AMX weight packing of its CPU path (nothing runs
    the layer here: the weight is left as SGLang's CPU path leaves it before packing). Each FP8 method's
    post-processing first records its module's tensors as loaded. A dense per-tensor FP8 layer
    (quant_method fp8) is also post-processed, on a copy, in the branch SGLang takes on an NVIDIA GPU with
    FP8 (compute capability 8.9 to 10: cutlass's per-channel kernel), which CPU never takes: every fused
    part's scale spread over its rows (convert_to_channelwise), the codes kept, the weight transposed.
    Returns both records ({id(module): {name: tensor}}: as loaded, and as that GPU branch leaves it),
    which the caller clears per model."""
    from sglang.srt.layers.quantization import fp8, utils
    from sglang.srt.layers.quantization.compressed_tensors import compressed_tensors as ct
    from sglang.srt.layers.quantization.compressed_tensors.schemes import compressed_tensors_w8a8_fp8_moe as ct_moe
    from sglang.srt.layers.quantization.kv_cache import BaseKVCacheMethod

    utils.scaled_fp8_quant = fp8.scaled_fp8_quant = ct_moe.scaled_fp8_quant = static_fp8_quant
    fp8._is_cpu_amx_available = True
    fp8._amx_process_weight_after_loading = lambda layer, names: None
    # compressed-tensors asks the CUDA device's capability when it picks a layer's scheme: answered
    # "supported", as a GPU that runs FP8 would.
    ct.CompressedTensorsConfig._check_scheme_supported = lambda self, min_capability, error=True: True
    record, on_gpu = {}, {}
    for cls in (fp8.Fp8LinearMethod, fp8.Fp8MoEMethod, BaseKVCacheMethod, ct.CompressedTensorsLinearMethod,
                ct.CompressedTensorsFusedMoEMethod):
        def recorded(self, layer, _original=cls.process_weights_after_loading, _cls=cls):
            record[id(layer)] = {k: v.detach().clone() for k, v in layer.state_dict().items()}
            if _cls is fp8.Fp8LinearMethod and not self.block_quant:
                on_gpu[id(layer)] = gpu_branch(self, layer, _original, fp8)
            return _original(self, layer)

        cls.process_weights_after_loading = recorded
    return record, on_gpu


def gpu_branch(method, layer, original, fp8):
    """LAYER's tensors after METHOD's post-processing in its NVIDIA GPU branch (cutlass FP8), run on a copy:
    SGLang's platform flag says not CPU and the method has cutlass, for that call."""
    import torch

    copy = torch.nn.Module()
    for name, tensor in layer.named_parameters(recurse=False):
        copy.register_parameter(name, torch.nn.Parameter(tensor.detach().clone(), requires_grad=False))
    copy.logical_widths = layer.logical_widths
    saved = fp8._is_cpu, method.cutlass_fp8_supported, method.use_marlin
    fp8._is_cpu, method.cutlass_fp8_supported, method.use_marlin = False, True, False
    try:
        original(method, copy)
    finally:
        fp8._is_cpu, method.cutlass_fp8_supported, method.use_marlin = saved
    return {k: v.detach().clone() for k, v in copy.state_dict().items()}


@contextlib.contextmanager
def gpu_fp8_branch(on):
    """While ON: SGLang's quant_method fp8 layers are made and post-processed as on an NVIDIA GPU with FP8
    (not CPU, cutlass, no Marlin), the form `export --engine-post-processed` writes for its sharded_state
    loader, which post-processes the empty model before it reads the files."""
    if not on:
        yield
        return
    from sglang.srt.layers.quantization import fp8

    saved = fp8._is_cpu, fp8.cutlass_fp8_supported, fp8.can_auto_enable_marlin_fp8
    fp8._is_cpu, fp8.cutlass_fp8_supported, fp8.can_auto_enable_marlin_fp8 = False, lambda: True, lambda: False
    try:
        yield
    finally:
        fp8._is_cpu, fp8.cutlass_fp8_supported, fp8.can_auto_enable_marlin_fp8 = saved


def as_recorded(model, record):
    """The model's state dict (its names: a module held twice, as tied embeddings are, under both) with every
    recorded module's own tensors replaced by the record's."""
    state = dict(model.state_dict())
    for name, module in model.named_modules(remove_duplicate=False):
        own = record.get(id(module))
        if own is None:
            continue
        prefix = f"{name}." if name else ""
        for key in [k for k in state if k.startswith(prefix) and "." not in k[len(prefix):]]:
            del state[key]  # post-processing may have replaced or dropped them
        state.update({prefix + k: v for k, v in own.items()})
    return state


def sync(rank, spec, live, save, publish, spawn_ranks):
    """--sync: the weight server updated, then the live model refilled by the custom weight loader."""
    import time

    import torch.distributed as dist

    import shardload.sglang

    model, job_args = live
    addresses = {name: t.data_ptr() for name, t in model.state_dict().items()}
    dist.barrier()  # every rank done with its first fill before the server changes
    if rank == 0:
        post(spec, "/update_weights_from_disk", {"model_path": spec["model"]})
    dist.barrier()
    publish(job_args, role="scheduler", ranks=spawn_ranks(world_rank=rank))  # what SGLang's workers hold
    start = time.perf_counter()
    summary = shardload.sglang.sync_weights(model, [])
    seconds = time.perf_counter() - start
    moved = [n for n, t in model.state_dict().items() if t.data_ptr() != addresses[n]]
    assert not moved, f"parameters moved: {moved[:5]}"
    save(model, spec["out"])
    if rank == 0:
        print(f"update: sync_weights refilled {summary['bytes']} bytes from the server in {seconds:.4f} s", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", nargs="+", metavar="MODEL:OUT:FORMAT",
                        help="load MODEL with load format FORMAT (auto, sharded_state, shardload, server=NAME), "
                             "save to OUT")
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--sync", type=json.loads, default=None, help="see the module's text")
    args = parser.parse_args()
    args.jobs = [job.rsplit(":", 2) for job in args.jobs]
    for out in [out for _, out, _ in args.jobs] + ([args.sync["out"]] if args.sync else []):
        os.makedirs(out, exist_ok=True)
    run_ranks("sglang_ranks", rank_main, args)


if __name__ == "__main__":
    main()
