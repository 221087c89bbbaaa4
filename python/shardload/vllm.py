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
consistent version per rank, every TP rank at the same version), which must serve MODEL at the same layout.
Filling the same model again copies in place (`sync_worker` through vLLM's collective_rpc, or `reload(model)`
in the model's process): after the weight server's `/update_weights_from_disk` or `/rebalance`, that is
the RL weight sync of a live engine. A refill goes through vLLM's own in-place reload machinery
(refill_processed): each layer restored to its loaded form, filled, post-processed again by vLLM and
copied back at the same addresses, so FP8 layers, MLA's derived tensors and repacked kernels are right.
(vLLM's own `reload_weights` needs a loader that yields checkpoint weights; this one does not, so sync
through `sync_worker`.) MODEL is a local directory or a Hugging Face model id, fetched as vLLM's own loader
fetches it (--revision, --download-dir; from the cache alone under HF_HUB_OFFLINE).
"""
from .engines import all_gather_versions, checkpoint_dir, fill_rank, loader_extra
from .errors import InvalidArgumentError

LOAD_FORMAT = "shardload"


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


def fill(model, model_dir, rank, layout, *, weight_server=None, threads=0, refill=False, vllm_config=None):
    """Copies rank `rank` of `layout` into vLLM's `model` in place, from the checkpoint `model_dir` or
    from the weight server named `weight_server`, every TP rank at one version. Returns {bytes, seconds,
    version (server only)}. With `refill`, `model` has been post-processed: see refill_processed
    (`vllm_config`: the model's, where it is not vLLM's current one)."""
    def copy():
        return fill_rank(model, model_dir, rank, layout, "vllm", weight_server=weight_server, threads=threads,
                         group_versions=_group_versions, check_replaced=not refill)

    if not refill:
        return copy()
    return refill_processed(model, copy, vllm_config.model_config if vllm_config is not None else None)


def _materialize(layer, info, materialize_layer):
    """vLLM's materialize_layer, except that a loaded-form tensor of the same shape, strides and dtype as
    the tensor the running model holds under its name is that tensor itself: the fill then writes the
    running model's memory directly (no fresh allocation to fault in, and vLLM's copy back is a copy onto
    itself, which torch skips), as on the first load, where the post-processing also ran on the loaded
    tensors. Only tensors the post-processing changes in shape or layout (FP8 transposes, merged scales)
    are made fresh."""
    params, buffers = info.kernel_tensors
    for name, tensor in list(layer._parameters.items()) + list(layer._buffers.items()):
        if tensor is None or not tensor.is_meta:
            continue
        held = params.get(name, buffers.get(name))
        if (held is not None and held.shape == tensor.shape and held.stride() == tensor.stride()
                and held.dtype == tensor.dtype):
            setattr(layer, name, held)
    materialize_layer(layer, info)  # the rest: fresh tensors


def refill_processed(model, copy, model_config=None):
    """Runs `copy` (which fills the model's parameters as vLLM's weight loaders leave them) on a model that
    vLLM has post-processed, the way vLLM's own in-place reload (reload_weights, layerwise) does it: every
    layer is restored to its loaded form (vLLM's record of it), `copy` fills that, and each layer is
    post-processed again by vLLM's own code (FP8 requantization and transposes, MLA's W_UV / W_UK_T from
    kv_b_proj, kernel repacking) and copied back into the tensors the running model holds, which keep
    their addresses (captured graphs stay valid). Attention layers last, as vLLM orders them. A tensor
    whose loaded form is the one the running model holds is filled in place (_materialize). If `copy`
    fails, every layer gets its tensors back (those filled in place hold what was copied: copy checks
    names, shapes and dtypes before it writes anything). Returns what `copy` returns."""
    from vllm.config import get_current_vllm_config
    from vllm.model_executor.layers.attention import is_deferred_attention_layer
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
    from vllm.model_executor.model_loader.reload import layerwise
    from vllm.model_executor.model_loader.reload.meta import materialize_layer
    from vllm.model_executor.model_loader.reload.utils import get_layer_tensors

    model_config = model_config or get_current_vllm_config().model_config
    layerwise.initialize_layerwise_reload(model)
    layers = []
    for layer in model.modules():
        info = layerwise.get_layerwise_info(layer)
        if info.can_load():
            _materialize(layer, info, materialize_layer)
            layers.append((layer, info))
    try:
        result = copy()
    except BaseException:
        for layer, info in layers:
            layerwise._place_kernel_tensors(layer, info)
            info.reset()
        if hasattr(model, "_original_do_torchao_reload"):  # as finalize_layerwise_processing leaves it
            model._do_torchao_reload = model._original_do_torchao_reload
        raise
    for layer, info in layers:
        for tensor in get_layer_tensors(layer).values():
            tensor.weight_loader = layerwise._get_original_loader(tensor)
        if is_deferred_attention_layer(layer):
            continue  # finalize_layerwise_processing, below: after every layer it reads
        if hasattr(layer, "_already_called_process_weights_after_loading"):
            delattr(layer, "_already_called_process_weights_after_loading")
        method = getattr(layer, "quant_method", None)
        if isinstance(method, QuantizeMethodBase):
            method.process_weights_after_loading(layer)
            if hasattr(layer, "update_param_tp_status"):
                layer.update_param_tp_status()
        layerwise._copy_and_restore_kernel_tensors(layer, info)
        info.reset()
    # The attention layers: their kernel tensors back, then their own post-processing (MLA derives
    # W_UV / W_UK_T from the new kv_b_proj); the flags vLLM's reload set, restored.
    layerwise.finalize_layerwise_processing(model, model_config)
    return result


def _group_versions(version):
    """Every tensor-parallel rank's version (vLLM's TP group)."""
    from vllm.distributed import get_tp_group

    return all_gather_versions(version, lambda: get_tp_group().cpu_group)


def reload(model, model_dir, *, weight_server=None, vllm_config=None, threads=0):
    """The RL weight sync of a live vLLM model in this process: its parameters refilled in place (same
    addresses) from the weight server (after its /update_weights_from_disk or /rebalance) or from the
    checkpoint `model_dir`. Returns fill's summary."""
    rank, layout = vllm_layout(vllm_config)
    return fill(model, model_dir, rank, layout, weight_server=weight_server, threads=threads, refill=True,
                vllm_config=vllm_config)


def sync_worker(worker, *, weight_server, model_dir=None, threads=0):
    """The RL weight sync of a running vLLM, for its workers: after the weight server's
    /update_weights_from_disk (or /rebalance), every worker refills its model in place from it.

        llm.collective_rpc(shardload.vllm.sync_worker, kwargs={"weight_server": "qwen"})

    `worker` is what vLLM's collective_rpc passes a function (its worker: model_runner, vllm_config);
    `model_dir` defaults to the model vLLM was started on. Returns fill's summary of this rank."""
    from vllm.config import set_current_vllm_config

    config = worker.vllm_config
    with set_current_vllm_config(config):
        return reload(worker.model_runner.model, model_dir or vllm_checkpoint_dir(config.model_config,
                                                                                  config.load_config),
                      weight_server=weight_server, vllm_config=config, threads=threads)


def vllm_checkpoint_dir(model_config, load_config):
    """The local folder of vLLM's model: its path, or its Hugging Face id fetched by vLLM's own helpers
    (engines.checkpoint_dir): --revision, --download-dir and --ignore-patterns as vLLM's loader takes them."""
    from vllm.model_executor.model_loader.weight_utils import (download_safetensors_index_file_from_hf,
                                                               download_weights_from_hf)

    return checkpoint_dir(model_config.model, revision=model_config.revision,
                          download_dir=load_config.download_dir, ignore_patterns=load_config.ignore_patterns,
                          download_weights=download_weights_from_hf,
                          download_index=download_safetensors_index_file_from_hf)


def _loader_class():
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class ShardloadModelLoader(BaseModelLoader):
        """vLLM's --load-format shardload."""

        def __init__(self, load_config):
            super().__init__(load_config)
            self.extra = loader_extra(load_config.model_loader_extra_config, "--model-loader-extra-config")

        def download_model(self, model_config):
            vllm_checkpoint_dir(model_config, self.load_config)

        def load_weights(self, model, model_config):
            rank, layout = vllm_layout()
            self.last = fill(model, vllm_checkpoint_dir(model_config, self.load_config), rank, layout,
                             weight_server=self.extra.get("weight_server"),
                             threads=int(self.extra.get("threads", 0)))

    return ShardloadModelLoader


def register():
    """vLLM's general plugin entry point: adds load format "shardload" (again: replaces it, vLLM warns)."""
    from vllm.model_executor.model_loader import register_model_loader

    register_model_loader(LOAD_FORMAT)(_loader_class())
