"""SGLang's own parameters of a model, rank by rank, on CPU: T processes in a real gloo group, each
building SGLang's model class and filling it with SGLang's own loader (its default loader from the
Hugging Face checkpoint, or `sharded_state` from an export), then saving the rank's state dict as
SGLang's `save_sharded_state` sees it (tensors sharing storage reduced to one) to OUT/rank-R.safetensors.

Run by the engines' PyPI interpreter (SGLang installed with --no-deps over the vLLM environment):
  python sglang_ranks.py --tp T [--ep EP] MODEL:OUT:FORMAT...   (FORMAT: auto or sharded_state)
PyNccl is off; sgl_kernel (SGLang's CUDA kernels, no CPU wheel on PyPI) and IPython (notebook display helpers
sglang.utils imports) are stand-in modules here: loading calls nothing of either.
"""
import argparse
import importlib.machinery
import os
import sys

from rank_group import run_ranks
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
            return ServerArgs(model_path=model, tp_size=args.tp, ep_size=args.ep, device="cpu",
                              dtype=args.dtype, load_format=load_format, skip_tokenizer_init=True,
                              disable_cuda_graph=True)

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
        for model, out, load_format in args.jobs:
            job_args = server_args(model, load_format)
            publish(job_args, role="scheduler", ranks=SpawnRanks(world_rank=rank))
            model = get_model(model_config=ModelConfig.from_server_args(job_args),
                              load_config=LoadConfig(load_format=load_format),
                              device_config=DeviceConfig("cpu"))
            state = ShardedStateLoader._filter_subtensors(model.state_dict())
            save_file({k: v.detach().contiguous() for k, v in state.items()},
                      os.path.join(out, f"rank-{rank}.safetensors"))
    except BaseException as e:  # the parent names the rank that failed
        import traceback

        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", nargs="+", metavar="MODEL:OUT:FORMAT",
                        help="load MODEL with load format FORMAT (auto, sharded_state), save to OUT")
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    args.jobs = [job.rsplit(":", 2) for job in args.jobs]
    for _, out, _ in args.jobs:
        os.makedirs(out, exist_ok=True)
    run_ranks("sglang_ranks", rank_main, args)


if __name__ == "__main__":
    main()
