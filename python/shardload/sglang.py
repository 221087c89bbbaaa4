"""shardload in SGLang (docs/engines.md): a model loader, and a custom weight loader for RL sync.

SGLang has no load-format plugin point; it takes a loader class in place of a format name
(LoadConfig.load_format), and runs the functions named by `--custom-weight-loader` on every rank when
`update_weights_from_tensor` names them as its load_format.

    # The first load: each rank plans SGLang's layout (its TP rank and size, its MoE expert-parallel
    # size), reads only its own bytes of the checkpoint (or copies them from a weight server) and fills
    # SGLang's parameters in place under SGLang's names.
    LoadConfig(load_format=shardload.sglang.ShardloadLoader,
               model_loader_extra_config={"weight_server": "qwen"})      # optional

    # RL sync of a running SGLang: after the weight server's /update_weights_from_disk or /rebalance,
    python -m sglang.launch_server --model-path MODEL --tp-size 4 --ep-size 2 \\
        --custom-weight-loader shardload.sglang.sync_weights \\
        --model-loader-extra-config '{"weight_server": "qwen"}'
    engine.update_weights_from_tensor(named_tensors=[], load_format="shardload.sglang.sync_weights")

sync_weights ignores the tensors it is given: every rank copies its own from the weight server's shared
memory, in place, the ranks agreeing on one version.
"""
import json

from .engines import all_gather_versions, checkpoint_dir, engine_layout, fill_rank, loader_extra, torch_dtype
from .errors import InvalidArgumentError


def sglang_layout(model, dtype):
    """(rank, layout keywords) of this process under SGLang's parallel state: SGLang's MoE-TP inside EP
    is shardload's tp x ep, in the model's torch `dtype`. `model` tells whether there are experts (SGLang's
    EP group exists either way)."""
    from sglang.srt.distributed.parallel_state import (get_moe_expert_parallel_world_size,
                                                       get_tensor_model_parallel_rank,
                                                       get_tensor_model_parallel_world_size)

    has_experts = any(hasattr(m, "w13_weight") for m in model.modules())
    layout = {"tp": get_tensor_model_parallel_world_size(),
              "ep": get_moe_expert_parallel_world_size() if has_experts else 1,
              "dtype": str(dtype).removeprefix("torch.")}
    return get_tensor_model_parallel_rank(), layout


def _group_versions(version):
    """Every tensor-parallel rank's version (SGLang's TP group)."""
    from sglang.srt.distributed.parallel_state import get_tp_group

    return all_gather_versions(version, lambda: get_tp_group().cpu_group)


def fill(model, model_dir, rank, layout, *, weight_server=None, threads=0, check_replaced=True):
    """Copies rank `rank` of `layout` into SGLang's `model` in place, from the checkpoint `model_dir` or
    the weight server `weight_server` (every TP rank at one version). Returns {bytes, seconds, version}."""
    return fill_rank(model, model_dir, rank, layout, "sglang", weight_server=weight_server, threads=threads,
                     group_versions=_group_versions, check_replaced=check_replaced)


def _quantized_modules(model):
    """{module name: module} of the modules whose quantization method post-processes what the loaders
    fill (FP8 layers, attention KV-cache scales): not SGLang's unquantized methods."""
    from sglang.srt.layers.quantization.unquant import (UnquantizedEmbeddingMethod, UnquantizedFusedMoEMethod,
                                                        UnquantizedLinearMethod)

    plain = (UnquantizedEmbeddingMethod, UnquantizedFusedMoEMethod, UnquantizedLinearMethod)
    return {name: m for name, m in model.named_modules()
            if getattr(m, "quant_method", None) is not None and not isinstance(m.quant_method, plain)}


def _direct_state(module):
    return {**{n: t for n, t in module._parameters.items() if t is not None},
            **{n: t for n, t in module._buffers.items() if t is not None}}


def refill_processed(model, model_dir, rank, layout, *, weight_server, threads=0):
    """Refills a running SGLang model whose quantized layers SGLang post-processed (FP8: weights
    requantized and transposed, scales merged; KV-cache scales set), keeping every tensor where it is.
    SGLang has no reload path for such layers, so this does what vLLM's layerwise reload does: each
    quantized module gets temporary tensors in the form SGLang's loaders fill (the engine layout's shapes
    and dtypes), shardload fills them, SGLang's own process_weights_after_loading runs on the module, and
    its results are copied into the tensors the running model holds, which are then put back. The
    temporary tensors are one rank's loaded weights more, on the running tensors' device; each module's
    go as soon as it is copied. If the fill fails, every module gets its running tensors back untouched;
    a module whose post-processed tensors do not match the running ones (shape, dtype) is refused before
    any of its tensors is written. A model without quantized layers is copied in place (fill)."""
    import torch

    modules = _quantized_modules(model)
    if not modules:  # nothing post-processed: a copy in place
        return fill(model, model_dir, rank, layout, weight_server=weight_server, threads=threads)
    entries = engine_layout(model_dir, rank=rank, engine="sglang", **layout)
    # The running tensors, and the registries as they are (entries set to None included).
    registries = {name: (dict(m._parameters), dict(m._buffers)) for name, m in modules.items()}
    running = {name: _direct_state(m) for name, m in modules.items()}
    try:
        for module in modules.values():  # the loaded form only: what the post-processing added goes too
            module._parameters.clear()
            module._buffers.clear()
        for e in entries:
            owner, _, attr = e["name"].rpartition(".")
            if owner in modules:
                device = next((t.device for t in running[owner].values()), torch.device("cpu"))
                tensor = torch.empty(e["shape"], dtype=torch_dtype(e["dtype"]), device=device)
                modules[owner]._parameters[attr] = torch.nn.Parameter(tensor, requires_grad=False)
        summary = fill(model, model_dir, rank, layout, weight_server=weight_server, threads=threads,
                       check_replaced=False)
        with torch.no_grad():
            for name, module in modules.items():
                module.quant_method.process_weights_after_loading(module)
                processed = _direct_state(module)
                copies = []
                for attr, tensor in running[name].items():
                    new = processed.get(attr)
                    if new is None:  # consumed by the post-processing (a slot it read)
                        continue
                    if new.shape != tensor.shape or new.dtype != tensor.dtype:
                        raise InvalidArgumentError(
                            "SGLang's post-processing made another tensor than the running model holds",
                            tensor=f"{name}.{attr}", field="shape/dtype",
                            expected=f"{tuple(tensor.shape)} {tensor.dtype}", found=f"{tuple(new.shape)} {new.dtype}")
                    copies.append((tensor, new))
                for tensor, new in copies:
                    tensor.copy_(new)
                _restore(module, registries[name])
    finally:
        for name, module in modules.items():
            _restore(module, registries[name])
    return summary


def _restore(module, registry):
    parameters, buffers = registry
    module._parameters.clear()
    module._parameters.update(parameters)
    module._buffers.clear()
    module._buffers.update(buffers)


def sync_weights(model, named_tensors=()):
    """SGLang's custom weight loader (`--custom-weight-loader shardload.sglang.sync_weights`): the live
    model refilled in place from the weight server named in --model-loader-extra-config (refill_processed:
    quantized layers through SGLang's post-processing), then the model's post-load fixup (post_load_weights)
    run again. The tensors SGLang passes are ignored (send none)."""
    from sglang.srt.runtime_context import get_model

    args = get_model()
    extra = loader_extra(args.model_loader_extra_config, "--model-loader-extra-config")
    if "weight_server" not in extra:
        raise InvalidArgumentError("shardload.sglang.sync_weights needs the weight server's name",
                                   field="model_loader_extra_config", expected='{"weight_server": NAME}',
                                   found=json.dumps(sorted(extra)))
    from sglang.srt.model_loader.loader import post_load_weights

    from sglang.srt.configs.load_config import LoadConfig

    model_dir = sglang_checkpoint_dir(args.model_path, args.revision, LoadConfig(download_dir=args.download_dir))
    rank, layout = sglang_layout(model, _server_args_dtype(args.dtype, model))
    summary = refill_processed(model, model_dir, rank, layout, weight_server=extra["weight_server"],
                               threads=int(extra.get("threads", 0)))
    # What SGLang derives from the weights after loading (DeepSeek's MLA w_kc / w_vc from kv_b_proj) is
    # derived again, as SGLang's own loaders that bypass model.load_weights do: stale otherwise.
    post_load_weights(model)
    return summary


def sglang_checkpoint_dir(model_path, revision, load_config):
    """The local folder of SGLang's model: its path, or its Hugging Face id fetched by SGLang's own helpers
    (engines.checkpoint_dir), with the load config's download folder and ignore patterns."""
    from sglang.srt.model_loader.weight_utils import (download_safetensors_index_file_from_hf,
                                                      download_weights_from_hf)

    return checkpoint_dir(model_path, revision=revision, download_dir=load_config.download_dir,
                          ignore_patterns=load_config.ignore_patterns, download_weights=download_weights_from_hf,
                          download_index=download_safetensors_index_file_from_hf)


def _server_args_dtype(name, model):
    """The model's torch dtype where only the server arguments are at hand ("auto": the parameters')."""
    import torch

    if name in (None, "auto"):
        return next(p.dtype for p in model.parameters() if p.is_floating_point())
    return getattr(torch, {"half": "float16", "float": "float32"}.get(name, name))


def _loader_class():
    import torch

    from sglang.srt.model_loader.loader import (BaseModelLoader, _get_quantization_config, _initialize_model,
                                                post_load_weights)
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    class Loader(BaseModelLoader):
        """SGLang's model loader from shardload: LoadConfig(load_format=shardload.sglang.ShardloadLoader)."""

        def download_model(self, model_config):
            sglang_checkpoint_dir(model_config.model_path, model_config.revision, self.load_config)

        def load_model(self, *, model_config, device_config):
            extra = loader_extra(self.load_config.model_loader_extra_config, "model_loader_extra_config")
            quant_config = _get_quantization_config(model_config, self.load_config)
            with set_default_torch_dtype(model_config.dtype):
                with torch.device(device_config.device):
                    model = _initialize_model(model_config, self.load_config, quant_config)
                rank, layout = sglang_layout(model, model_config.dtype)
                model_dir = sglang_checkpoint_dir(model_config.model_path, model_config.revision, self.load_config)
                self.last = fill(model, model_dir, rank, layout,
                                 weight_server=extra.get("weight_server"), threads=int(extra.get("threads", 0)))
                # As SGLang's sharded_state loader, which also fills the parameters as they are held.
                for _, module in model.named_modules():
                    method = getattr(module, "quant_method", None)
                    if method is not None:
                        method.process_weights_after_loading(module)
                post_load_weights(model)
            return model.eval()

    return Loader


def __getattr__(name):
    # The class derives from SGLang's, imported only where SGLang is.
    if name == "ShardloadLoader":
        cls = _loader_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
