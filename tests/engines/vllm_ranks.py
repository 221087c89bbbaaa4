"""vLLM's own parameters of a model, rank by rank, on CPU: T processes in a real gloo group, each
building vLLM's model class and filling it with vLLM's own loader (its default loader from the
Hugging Face checkpoint, or `sharded_state` from an export), then saving the rank's state dict as
vLLM's `save_sharded_state` sees it (tensors sharing storage reduced to one) to OUT/rank-R.safetensors.

Run by the engines' PyPI interpreter (tests/engines/requirements.lock):
  python vllm_ranks.py MODEL OUT --tp T [--ep] [--load-format auto|sharded_state]
"""
import argparse
import os
import socket
import sys

# vLLM's CUDA wheel picks its CPU platform from this, read when vllm is first imported.
os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# One thread per rank: the ranks run side by side on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, args, port, errors):
    try:
        import torch

        torch.set_num_threads(1)
        from safetensors.torch import save_file
        from vllm.config import (DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig,
                                 set_current_vllm_config)
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.model_executor.model_loader import get_model_loader
        from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader
        from vllm.utils.torch_utils import set_default_torch_dtype

        model_config = ModelConfig(model=args.model, dtype=args.dtype, skip_tokenizer_init=True,
                                   enforce_eager=True, seed=0)
        load_config = LoadConfig(load_format=args.load_format)
        parallel_config = ParallelConfig(tensor_parallel_size=args.tp,
                                         enable_expert_parallel=args.ep)
        vllm_config = VllmConfig(model_config=model_config, load_config=load_config,
                                 parallel_config=parallel_config, device_config=DeviceConfig("cpu"))
        with set_current_vllm_config(vllm_config):
            init_distributed_environment(world_size=args.tp, rank=rank, local_rank=rank,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}",
                                         backend="gloo")
            initialize_model_parallel(args.tp, 1)
            # The loader's own steps without the post-processing (CPU GEMM packing, FP8 kernels),
            # which needs vLLM's compiled CPU ops: the parameters as the weight loaders leave them.
            loader = get_model_loader(load_config)
            with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
                model = loader.create_model(vllm_config=vllm_config, model_config=model_config)
                loader.load_weights(model, model_config)
            state = ShardedStateLoader._filter_subtensors(model.state_dict())
            save_file({k: v.detach().contiguous() for k, v in state.items()},
                      os.path.join(args.out, f"rank-{rank}.safetensors"))
    except BaseException as e:  # the parent names the rank that failed
        import traceback

        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        raise


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--ep", action="store_true", help="vLLM's expert parallelism (ep = tp)")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, args, port, errors)) for r in range(args.tp)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        while not errors.empty():
            sys.stderr.write(errors.get() + "\n")
        sys.exit(f"vllm_ranks: ranks {failed} failed")


if __name__ == "__main__":
    main()
