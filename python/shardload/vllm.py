"""shardload as vLLM's model loader: `--load-format shardload` (docs/engines.md).

Registered through vLLM's `vllm.general_plugins` entry point (the package's metadata names `register`),
so every process vLLM starts has it. Each rank plans the layout of vLLM's own parallel state (its
tensor-parallel rank and size, expert parallelism when `--enable-expert-parallel`), reads only its own
bytes of the Hugging Face checkpoint (shardload.load with ranks=[rank]) and copies them into vLLM's
parameters in place under vLLM's names (the table `export --engine vllm` writes by); vLLM then runs its
own post-processing as after any loader.

    vllm serve MODEL --load-format shardload --tensor-parallel-size 4
    vllm serve MODEL --load-format shardload --tensor-parallel-size 4 \\
        --model-loader-extra-config '{"weight_server": "qwen"}'   # from `shardload serve ... --name qwen`

With `weight_server` the rank is copied from the running weight server's shared memory instead (one
consistent version per rank), which must serve MODEL at the same layout. Loading again into the same
model (vLLM's `reload_weights`, or `reload(model)` here) copies again in place: after
`/update_weights_from_disk` on the weight server, that is the RL weight sync of a live engine.
"""
import time

from . import _shardload
from .engines import engine_layout, fill_from_server, fill_from_tensors
from .errors import ConflictError, InvalidArgumentError

LOAD_FORMAT = "shardload"
_EXTRA_KEYS = ("weight_server", "threads")
_VERSION_ATTEMPTS = 20


def vllm_layout(vllm_config=None):
    """(rank, layout keywords) of this process under vLLM's parallel state."""
    from vllm.config import get_current_vllm_config
    from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

    config = vllm_config or get_current_vllm_config()
    parallel = config.parallel_config
    if parallel.pipeline_parallel_size != 1:
        raise InvalidArgumentError("--load-format shardload: pipeline parallelism is not planned yet",
                                   field="pipeline_parallel_size", expected="1",
                                   found=str(parallel.pipeline_parallel_size))
    tp = get_tensor_model_parallel_world_size()
    expert_parallel = bool(parallel.enable_expert_parallel) and config.model_config.is_moe
    if expert_parallel and parallel.data_parallel_size != 1:
        # vLLM's expert group then spans the data-parallel replicas: a DP-attention layout shardload's
        # engine names are not checked for yet.
        raise InvalidArgumentError("--load-format shardload: expert parallelism across data-parallel "
                                   "replicas is not checked against vLLM yet", field="data_parallel_size",
                                   expected="1 with --enable-expert-parallel",
                                   found=str(parallel.data_parallel_size))
    dtype = str(config.model_config.dtype).removeprefix("torch.")
    layout = {"tp": tp, "ep": tp if expert_parallel else 1, "dtype": dtype}
    return get_tensor_model_parallel_rank(), layout


def _extra(load_config):
    extra = dict(load_config.model_loader_extra_config or {})
    unknown = sorted(extra.keys() - set(_EXTRA_KEYS))
    if unknown:
        raise InvalidArgumentError("--model-loader-extra-config: not a key of --load-format shardload",
                                   field=unknown[0], expected=", ".join(_EXTRA_KEYS), found=unknown[0])
    return extra


def fill(model, model_dir, rank, layout, *, weight_server=None, threads=0):
    """Copies rank `rank` of `layout` into vLLM's `model` in place, from the checkpoint `model_dir` or
    from the weight server named `weight_server`. Returns {bytes, seconds, version (server only)}."""
    start = time.perf_counter()
    entries = engine_layout(model_dir, rank=rank, engine="vllm", **layout)
    if weight_server is None:
        loaded = _shardload.load(str(model_dir), ranks=[rank], threads=threads, **layout)
        copied = fill_from_tensors(model, entries, loaded.tensors(rank), where=f"rank {rank} of {model_dir}")
        return {"bytes": copied, "seconds": time.perf_counter() - start}
    from .client import connect

    # One consistent version per rank is the client's; one version over the ranks is ours: an update
    # that commits while the ranks copy leaves some ranks at the old version, so every rank copies
    # again until the group agrees (the server's latest, once it stops updating).
    with connect(weight_server, rank=rank) as client:
        for attempt in range(_VERSION_ATTEMPTS):
            version = fill_from_server(model, entries, client, rank)
            versions = _group_versions(version)
            if len(set(versions)) == 1:
                break
            time.sleep(min(0.01 * 2 ** attempt, 1.0))
        else:
            raise ConflictError(f"the ranks read different versions of weight server {weight_server!r} "
                                f"{_VERSION_ATTEMPTS} times: it kept updating", field="version",
                                expected="one version on every rank", found=str(versions))
    return {"bytes": sum(p.numel() * p.element_size() for p in model.state_dict().values()),
            "seconds": time.perf_counter() - start, "version": version}


def _group_versions(version):
    """Every tensor-parallel rank's version (vLLM's TP group; [version] without one)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return [version]
    from vllm.distributed import get_tp_group

    group = get_tp_group()
    out = [None] * group.world_size
    dist.all_gather_object(out, version, group=group.cpu_group)
    return out


def reload(model, model_dir, *, weight_server=None, vllm_config=None, threads=0):
    """The RL weight sync of a live vLLM model in this process: its parameters refilled in place (same
    addresses) from the weight server (after its /update_weights_from_disk or /rebalance) or from the
    checkpoint `model_dir`. Returns fill's summary."""
    rank, layout = vllm_layout(vllm_config)
    return fill(model, model_dir, rank, layout, weight_server=weight_server, threads=threads)


def _loader_class():
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class ShardloadModelLoader(BaseModelLoader):
        """vLLM's --load-format shardload."""

        def __init__(self, load_config):
            super().__init__(load_config)
            self.extra = _extra(load_config)

        def download_model(self, model_config):
            pass  # a local Hugging Face checkpoint: nothing to fetch

        def load_weights(self, model, model_config):
            rank, layout = vllm_layout()
            self.last = fill(model, model_config.model, rank, layout,
                             weight_server=self.extra.get("weight_server"),
                             threads=int(self.extra.get("threads", 0)))

    return ShardloadModelLoader


def register():
    """vLLM's general plugin entry point: adds load format "shardload" (idempotent)."""
    from vllm.model_executor.model_loader import register_model_loader

    register_model_loader(LOAD_FORMAT)(_loader_class())
