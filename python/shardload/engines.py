"""What the engine hooks (shardload.vllm) share: a rank of a layout under an engine's names, dtypes and
buffers (docs/engines.md, the same table `export --engine` writes by), filled into the engine's own
model in place, from shardload's load of the checkpoint or from a running weight server.

A rank's engine tensors are listed by `_shardload.engine_layout(model, rank=, engine=, **layout)`: per
tensor the engine's name, dtype and shape and the layout.md tensor it is made of, with its shape (None: a
buffer no checkpoint has, every element `fill`; a source of one element where the tensor holds more, a
fused FP8 layer's merged scale, goes into every element). Filling checks the whole list against the module
first, then
copies: a module that does not match is named in one error and left untouched."""
import math
import time

from . import _shardload
from .errors import ConflictError, InvalidArgumentError

_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
                 "U8": "uint8", "I8": "int8",
                 "I32": "int32", "I64": "int64"}


def torch_dtype(name):
    import torch

    dtype = getattr(torch, _TORCH_DTYPES.get(name, ""), None)
    if dtype is None:
        raise InvalidArgumentError("no torch dtype for this tensor dtype", field="dtype",
                                   expected=", ".join(_TORCH_DTYPES), found=name)
    return dtype


def engine_layout(model, *, rank, engine, **layout):
    """[{name, dtype, shape, source, fill}] of `rank` under `engine`; InvalidArgumentError when the
    engine cannot take the layout (docs/engines.md: what is refused)."""
    return _shardload.engine_layout(str(model), rank=rank, engine=engine, **layout)


def state_targets(module):
    """The module's state as the engines' sharded_state loaders see it: its persistent parameters and
    buffers, a tensor held under several names (tied embeddings) under the smallest of them."""
    state = module.state_dict(keep_vars=True)
    kept = {}
    for name in sorted(state):
        t = state[name]
        kept.setdefault((t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride())), name)
    return {name: state[name] for name in kept.values()}


def _target(targets, e):
    """The engine's tensor an entry fills: the tensor, or the rows `rows` [first, count] of it where the engine
    holds two layout tensors as one (vLLM's DeepSeek-V3.2 indexer.wk_weights_proj)."""
    t = targets[e["name"]]
    rows = e.get("rows")
    return t if rows is None else t.narrow(0, rows[0], rows[1])


def _check(entries, targets, where):
    """Every mismatch between the engine layout and the module, named, in one error."""
    problems = []
    names = {e["name"] for e in entries}
    problems += [f"{n}: in the module, not in the layout" for n in sorted(targets.keys() - names)]
    problems += [f"{n}: in the layout, not in the module" for n in sorted(names - targets.keys())]
    for e in entries:
        t = targets.get(e["name"])
        if t is None:
            continue
        rows = e.get("rows")
        if rows is not None and (t.dim() == 0 or rows[0] + rows[1] > t.shape[0]):
            problems.append(f"{e['name']}: rows {rows[0]} to {rows[0] + rows[1]} outside the module's {tuple(t.shape)}")
            continue
        t = _target(targets, e)
        if tuple(t.shape) != tuple(e["shape"]):
            problems.append(f"{e['name']}: shape {tuple(e['shape'])} != the module's {tuple(t.shape)}")
        elif t.dtype != torch_dtype(e["dtype"]):
            problems.append(f"{e['name']}: dtype {e['dtype']} != the module's {t.dtype}")
        elif e["source"] is not None and math.prod(e["source_shape"]) not in (1, t.numel()):
            problems.append(f"{e['name']}: made of {e['source']} {tuple(e['source_shape'])}, neither its "
                            "elements nor one")
    if problems:
        raise InvalidArgumentError(f"the engine's model does not hold what {where} holds: " + "; ".join(problems),
                                   field="state_dict", expected="the layout's names, shapes and dtypes",
                                   found=f"{len(problems)} mismatch(es)")


def fill_from_tensors(module, entries, sources, *, where="the layout", targets=None):
    """Copies a rank into `module` in place: `sources` is {layout name: tensor} (shardload Tensors or
    torch tensors, e.g. LoadedModel.tensors(rank)); `entries` its engine_layout; `targets` the module's
    state_targets where the caller has them. Returns the bytes copied."""
    import torch

    from .tensors import to_torch

    targets = state_targets(module) if targets is None else targets
    _check(entries, targets, where)
    missing = sorted(e["source"] for e in entries if e["source"] is not None and e["source"] not in sources)
    if missing:
        raise InvalidArgumentError(f"{len(missing)} layout tensor(s) missing from the source", tensor=missing[0],
                                   field="sources", expected="every tensor of the rank", found="missing")
    copied = 0
    with torch.no_grad():
        for e in entries:
            target = _target(targets, e)
            if e["source"] is None:
                target.fill_(e["fill"])
                continue
            src = sources[e["source"]]
            src = src if isinstance(src, torch.Tensor) else to_torch(src)
            if src.dtype == torch.uint8 and target.dtype != torch.uint8:
                src = src.view(target.dtype)  # FP8 bytes
            _copy_entry(target, src)
            copied += target.numel() * target.element_size()
    return copied


def _copy_entry(target, src):
    """The source into the engine's tensor; a source of one element where the engine's tensor holds more
    (a fused FP8 layer's merged scale, where the engines keep one per part) goes into every element."""
    if src.numel() == target.numel():
        target.copy_(src.reshape(target.shape))
    else:  # one element (_check)
        target.copy_(src.reshape(()).expand(target.shape))


def fill_from_checkpoint(module, entries, model_dir, rank, layout, *, threads=0, window_bytes=0, targets=None):
    """Loads rank `rank` of `layout` from the checkpoint `model_dir` straight into `module`'s tensors, in
    place (_shardload.load_into_tensors: windows of whole modules are read, converted and post-processed
    in a ring of staging buffers and copied out, so host memory never holds the whole rank). A tensor the
    engine holds as the layout does (its name aside) is the destination itself; one it holds in another
    dtype (the q/k norms) or shape (per-part FP8 scales), or not contiguous, is loaded into a scratch
    tensor on the same device, then cast or spread. Returns the load's figures."""
    import torch

    targets = state_targets(module) if targets is None else targets
    _check(entries, targets, f"rank {rank} of {model_dir}")
    destinations, loaded, scratch, again = {}, {}, [], []
    for e in entries:
        if e["source"] is None:
            continue
        target = _target(targets, e)
        if e["source"] in loaded:  # a tensor the engine holds twice (under two names): copied from the first
            again.append((target, e))
            continue
        fp8 = e["source_dtype"].startswith("F8_")
        same = target.element_size() == 1 if fp8 else torch_dtype(e["source_dtype"]) == target.dtype
        if same and tuple(e["source_shape"]) == tuple(e["shape"]) and target.is_contiguous():
            dest = target
        else:
            dtype = torch.uint8 if fp8 else torch_dtype(e["source_dtype"])  # FP8 as its bytes (any torch)
            dest = torch.empty(tuple(e["source_shape"]), dtype=dtype, device=target.device)
            scratch.append((target, dest, e))
        loaded[e["source"]] = dest
        destinations[e["source"]] = (dest.data_ptr(), dest.numel() * dest.element_size(), _device_index(dest))
    stats = _shardload.load_into_tensors(str(model_dir), rank=rank, destinations=destinations, threads=threads,
                                         window_bytes=window_bytes, **layout)
    with torch.no_grad():
        for target, dest, e in scratch:
            src = dest.view(target.dtype) if dest.dtype == torch.uint8 and target.dtype != torch.uint8 else dest
            _copy_entry(target, src)
        for target, e in again:
            src = loaded[e["source"]]
            src = src.view(target.dtype) if src.dtype == torch.uint8 and target.dtype != torch.uint8 else src
            _copy_entry(target, src)
        for e in entries:
            if e["source"] is None:
                targets[e["name"]].fill_(e["fill"])
    # As fill_from_tensors counts: the tensors filled from the rank (not the constant buffers).
    stats["bytes"] = sum(_target(targets, e).numel() * _target(targets, e).element_size()
                         for e in entries if e["source"] is not None)
    return stats


def _device_index(tensor):
    """-1 for host memory, else the CUDA device's ordinal (what load_into_tensors takes)."""
    if tensor.device.type == "cpu":
        return -1
    if tensor.device.type == "cuda":
        return tensor.device.index if tensor.device.index is not None else 0
    raise InvalidArgumentError("shardload fills host memory or CUDA devices only", field="device",
                               expected="cpu or cuda", found=str(tensor.device))


def fill_from_server(module, entries, client, rank, *, targets=None):
    """Copies rank `rank` of a running weight server (shardload.connect) into `module` in place, one
    consistent version (Client.copy_into) for the whole rank; returns that version. A tensor the
    engine holds in another dtype than the server (vLLM's and SGLang's q/k norms: the model dtype, not
    float32) or shape (the engines' per-part FP8 scales) is copied into a scratch tensor within the same
    snapshot, then cast or spread. `targets`: the module's
    state_targets where the caller has them."""
    import torch

    targets = state_targets(module) if targets is None else targets
    _check(entries, targets, "the weight server's rank")
    direct, cast = {}, []
    for e in entries:
        if e["source"] is None:
            continue
        target = _target(targets, e)
        served_name = client.dtype(rank, e["source"])
        served = torch_dtype(served_name)
        whole = tuple(e["source_shape"]) == tuple(e["shape"])
        if whole and (served == target.dtype or served_name.startswith("F8_")):  # copy_into takes FP8 as bytes
            direct[e["source"]] = target
        else:
            scratch = torch.empty(tuple(e["source_shape"]), dtype=served)
            direct[e["source"]] = scratch
            cast.append((target, scratch, e))
    version = client.copy_into(direct, rank=rank)
    with torch.no_grad():
        for target, scratch, e in cast:
            _copy_entry(target, scratch)
        for e in entries:
            if e["source"] is None:
                targets[e["name"]].fill_(e["fill"])
    return version


_VERSION_ATTEMPTS = 20
LOADER_EXTRA_KEYS = ("weight_server", "threads")


def loader_extra(config, where):
    """The engine's model_loader_extra_config (a dict, or its JSON text) for shardload's loaders: only
    `weight_server` (a running server's name) and `threads` (of the checkpoint's read)."""
    import json

    extra = config or {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    unknown = sorted(set(extra) - set(LOADER_EXTRA_KEYS))
    if unknown:
        raise InvalidArgumentError(f"{where}: not a key of shardload's loader", field=unknown[0],
                                   expected=", ".join(LOADER_EXTRA_KEYS), found=unknown[0])
    return dict(extra)


def checkpoint_dir(model, *, revision, download_dir, ignore_patterns, download_weights, download_index):
    """The local folder of the checkpoint an engine was started on: MODEL itself when it is a directory,
    else a Hugging Face model id fetched as the engine's own loader fetches it, with the engine's own
    helpers (`download_weights(model, cache_dir, allow_patterns, revision, ignore_patterns=)`,
    `download_index(model, index_file, cache_dir, revision=)`): its safetensors weights, the index, and
    config.json, into the same snapshot of the engine's download folder or the Hugging Face cache; from
    the cache alone under HF_HUB_OFFLINE, as the engines do."""
    import os

    if os.path.isdir(model):
        return model
    from huggingface_hub import hf_hub_download

    folder = download_weights(model, download_dir, ["*.safetensors"], revision, ignore_patterns=ignore_patterns)
    download_index(model, "model.safetensors.index.json", download_dir, revision=revision)
    hf_hub_download(model, "config.json", cache_dir=download_dir, revision=revision)
    return folder


def fill_rank(module, model_dir, rank, layout, engine, *, weight_server=None, threads=0, group_versions=None,
              check_replaced=True, window_bytes=0):
    """Copies rank `rank` of `layout` into an engine's `module` in place, under `engine`'s names: from the
    checkpoint `model_dir` (only its bytes are read: the first fill straight into the tensors,
    fill_from_checkpoint; a refill through a whole rank read first, so that a failed read changes
    nothing), or from the weight server named `weight_server`. One consistent version per rank is the
    client's; one version over the ranks is `group_versions(version) -> [every rank's version]` (a
    collective of the engine's group): an update that commits while the ranks copy leaves some at the old
    version, so every rank copies again until the group agrees. Returns {bytes, seconds, staging_bytes
    (checkpoint only: the host memory the load held), version and names_from (server only: "weight
    server" when the server lists this engine's tensors, `shardload serve --engine`, else "checkpoint",
    planned from `model_dir`)}. `check_replaced=False`: the caller restored the module to its loaded form
    itself (shardload.vllm.refill_processed), so parameters made since the last fill are expected.
    `window_bytes`: the first fill's staging windows (0: 128 MiB)."""
    start = time.perf_counter()
    targets = state_targets(module)
    if check_replaced:
        _check_unprocessed(module, targets)
    if weight_server is None:
        entries = engine_layout(model_dir, rank=rank, engine=engine, **layout)
        if check_replaced and getattr(module, "_shardload_filled", None) is None:
            # The first fill of a model that serves nothing yet: straight into its tensors (a failed read
            # leaves them partly written, and the engine does not start).
            loaded = fill_from_checkpoint(module, entries, model_dir, rank, layout, threads=threads,
                                          window_bytes=window_bytes, targets=targets)
            copied, staging = loaded["bytes"], loaded["staging_bytes"]
        else:
            # A refill of a live model: the whole rank read first, so that a failed read leaves every
            # running tensor as it was.
            ranks = _shardload.load(str(model_dir), ranks=[rank], threads=threads, **layout)
            copied = fill_from_tensors(module, entries, ranks.tensors(rank), where=f"rank {rank} of {model_dir}",
                                       targets=targets)
            staging = ranks.stats["bytes_written"]  # the rank buffer
        if check_replaced:
            _remember_filled(module, targets)
        return {"bytes": copied, "seconds": time.perf_counter() - start, "staging_bytes": staging}
    from .client import connect

    with connect(weight_server, rank=rank) as client:
        # A server started with --engine lists the engine's table itself: no checkpoint needed here.
        entries = client.engine_layout(rank) if client.engine == engine else None
        names_from = "weight server" if entries is not None else "checkpoint"
        if entries is None:
            entries = engine_layout(model_dir, rank=rank, engine=engine, **layout)
        for attempt in range(_VERSION_ATTEMPTS):
            version = fill_from_server(module, entries, client, rank, targets=targets)
            versions = group_versions(version) if group_versions else [version]
            if len(set(versions)) == 1:
                break
            time.sleep(min(0.01 * 2 ** attempt, 1.0))
        else:
            raise ConflictError(f"the ranks read different versions of weight server {weight_server!r} "
                                f"{_VERSION_ATTEMPTS} times: it kept updating", field="version",
                                expected="one version on every rank", found=str(versions))
    if check_replaced:  # the check's record; a restored module's tensors are not the running ones
        _remember_filled(module, targets)
    copied = sum(t.numel() * t.element_size() for t in targets.values())
    return {"bytes": copied, "seconds": time.perf_counter() - start, "version": version, "names_from": names_from}


def _remember_filled(module, targets):
    module._shardload_filled = {name: t.data_ptr() for name, t in targets.items()}


def _check_unprocessed(module, targets):
    """A refill writes what the engines' weight loaders write. Where the engine's post-processing replaced
    a parameter since the last fill (repacked, requantized, transposed into a new tensor), those bytes
    would be wrong in it: refused, naming the parameters. (Post-processing in place, same address, cannot
    be seen here: docs/engines.md says where the hooks are right.)"""
    filled = getattr(module, "_shardload_filled", None)
    if filled is None:
        return
    replaced = sorted(name for name, ptr in filled.items() if name not in targets or targets[name].data_ptr() != ptr)
    if replaced:
        raise ConflictError(f"the engine replaced {len(replaced)} parameter(s) after shardload filled them "
                            "(its post-processing): a refill would write unprocessed bytes into them",
                            tensor=replaced[0], field="parameters", expected="the tensors shardload filled",
                            found=", ".join(replaced[:5]))


def all_gather_versions(version, group_of):
    """Every rank's version over the engine's group (`group_of()`: its CPU group of the TP ranks); [version]
    alone where torch.distributed is not initialized (one process)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return [version]
    group = group_of()
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, version, group=group)
    return out
