"""vLLM's own parameters of a model, rank by rank, on CPU: T processes in a real gloo group, each
building vLLM's model class and filling it with vLLM's own loader (its default loader from the
Hugging Face checkpoint, or `sharded_state` from an export), then saving the rank's state dict as
vLLM's `save_sharded_state` sees it (tensors sharing storage reduced to one) to OUT/rank-R.safetensors.

Run by the engines' PyPI interpreter (tests/engines/requirements.lock):
  python vllm_ranks.py --tp T MODEL:OUT:FORMAT[:ep]...
FORMAT is auto or sharded_state; `ep` turns on vLLM's expert parallelism (ep = tp) for that job (the
expert-parallel group vLLM makes spans the T ranks either way, so one group serves both).
"""
import argparse
import os

from rank_group import run_ranks

# vLLM's CUDA wheel picks its CPU platform from this, read when vllm is first imported.
os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# One thread per rank: the ranks run side by side on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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

        def configs(model, load_format, expert_parallel):
            model_config = ModelConfig(model=model, dtype=args.dtype, skip_tokenizer_init=True,
                                       enforce_eager=True, seed=0)
            load_config = LoadConfig(load_format=load_format)
            parallel_config = ParallelConfig(tensor_parallel_size=args.tp,
                                             enable_expert_parallel=expert_parallel)
            return model_config, load_config, VllmConfig(
                model_config=model_config, load_config=load_config,
                parallel_config=parallel_config, device_config=DeviceConfig("cpu"))

        # The group is made once; each job then builds its model under its own config (the
        # interpreter and vLLM's imports, most of the time, are paid once for all of them). vLLM
        # makes the expert-parallel group only under an MoE model's config: one is taken if any.
        first = [configs(model, fmt, ep)[2] for model, _, fmt, ep in args.jobs]
        first = next((c for c in first if c.model_config.is_moe), first[0])
        with set_current_vllm_config(first):
            init_distributed_environment(world_size=args.tp, rank=rank, local_rank=rank,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}",
                                         backend="gloo")
            initialize_model_parallel(args.tp, 1)
        for model, out, load_format, expert_parallel in args.jobs:
            model_config, load_config, vllm_config = configs(model, load_format, expert_parallel)
            with set_current_vllm_config(vllm_config):
                # The loader's own steps without the post-processing (CPU GEMM packing, FP8
                # kernels), which needs vLLM's compiled CPU ops: the parameters as the weight
                # loaders leave them.
                loader = get_model_loader(load_config)
                with set_default_torch_dtype(model_config.dtype), torch.device("cpu"):
                    model = loader.create_model(vllm_config=vllm_config, model_config=model_config)
                    loader.load_weights(model, model_config)
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
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    jobs = []
    for job in args.jobs:
        fields = job.split(":")
        if len(fields) not in (3, 4) or fields[3:] not in ([], ["ep"]):
            parser.error(f"not MODEL:OUT:FORMAT[:ep] (no ':' in paths): {job}")
        jobs.append((fields[0], fields[1], fields[2], fields[3:] == ["ep"]))
    args.jobs = jobs
    for _, out, _, _ in args.jobs:
        os.makedirs(out, exist_ok=True)
    run_ranks("vllm_ranks", rank_main, args)


if __name__ == "__main__":
    main()
