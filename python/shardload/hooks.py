"""Engine hooks: the checkpoint as (name, tensor) pairs for the engines' load_weights, a rank's tensors
copied into a torch module in place, and a rank loaded straight into a module's tensors."""
from . import _shardload
from .errors import InvalidArgumentError
from .tensors import to_torch


def iter_weights(model_dir, *, threads=0):
    """Yields (name, torch tensor) for every checkpoint tensor, in Hugging Face names, unsharded, as
    vLLM's and SGLang's load_weights(weights) consume them. Each file is read by shardload's parallel
    pread path into one buffer the tensors share; the buffer lives as long as any of them."""
    checkpoint = _shardload.Checkpoint(str(model_dir))
    for index in range(len(checkpoint.files)):
        for name, tensor in _shardload.read_file_tensors(checkpoint, index, threads=threads):
            yield name, to_torch(tensor)


def load_state_dict_into(module, rank_tensors, *, strict=True):
    """Copies {name: tensor} (a rank's tensors: shardload Tensors or torch tensors) into the module's
    parameters and buffers of the same names, in place (param.data.copy_), so that anything holding
    the parameters (CUDA graphs, optimizers) keeps them. Names, shapes and dtypes are checked first
    and every mismatch is named in one InvalidArgumentError; nothing is copied then. With strict=False,
    names on one side only are skipped (shapes and dtypes of the others are still checked).
    Returns the names copied."""
    import torch

    targets = dict(module.named_parameters())
    targets.update(dict(module.named_buffers()))
    sources = {name: (t if isinstance(t, torch.Tensor) else to_torch(t)) for name, t in rank_tensors.items()}
    problems = []
    if strict:
        problems += [f"{name}: not in the module" for name in sorted(sources.keys() - targets.keys())]
        problems += [f"{name}: not in the rank tensors" for name in sorted(targets.keys() - sources.keys())]
    for name in sorted(sources.keys() & targets.keys()):
        src, dst = sources[name], targets[name]
        if tuple(src.shape) != tuple(dst.shape):
            problems.append(f"{name}: shape {tuple(src.shape)} != the module's {tuple(dst.shape)}")
        elif src.dtype != dst.dtype:
            problems.append(f"{name}: dtype {src.dtype} != the module's {dst.dtype}")
    if problems:
        raise InvalidArgumentError("the rank tensors do not fit the module: " + "; ".join(problems),
                                   field="state_dict",
                                   expected="the module's names, shapes and dtypes",
                                   found=f"{len(problems)} mismatch(es)")
    copied = []
    with torch.no_grad():
        for name in sorted(sources.keys() & targets.keys()):
            targets[name].data.copy_(sources[name])
            copied.append(name)
    return copied


def load_into(module, model, *, rank, threads=0, window_bytes=0, strict=True, **layout):
    """Loads rank `rank` of a layout (keywords as load's) from the checkpoint `model` straight into the
    module's parameters and buffers of the same names (layout.md's), in place, as load_state_dict_into
    copies a loaded rank, but without the rank ever whole in host memory: windows of whole modules
    (`window_bytes`, 128 MiB by default) are read, converted and post-processed in a ring of three
    staging buffers and copied into the tensors, on the host or a CUDA device. Only this rank's bytes
    are read. Names, shapes and dtypes are checked first (an FP8 tensor may be torch.uint8, its bytes),
    and every mismatch is named in one InvalidArgumentError; nothing is written then. With strict=False,
    names on one side only are skipped: the module's keep their bytes. A read that fails midway (a file
    that changed or went unreadable) leaves the tensors partly written: to refill a live model all or
    nothing, load the rank first (load) and copy it (load_state_dict_into). Returns the load's figures
    {bytes_read, bytes_copied, staging_bytes (the host memory held), windows, seconds, io}."""
    import torch

    from .engines import _device_index, torch_dtype

    targets = dict(module.named_parameters())
    targets.update(dict(module.named_buffers()))
    plan = _shardload.plan(str(model), **layout)
    if not 0 <= rank < len(plan["ranks"]):
        raise InvalidArgumentError("no such rank in the layout", field="rank",
                                   expected=f"0 to {len(plan['ranks']) - 1}", found=str(rank))
    params = {p["name"]: p for p in plan["ranks"][rank]["params"] if p["exported"]}
    problems = []
    if strict:
        problems += [f"{name}: not in the module" for name in sorted(params.keys() - targets.keys())]
        problems += [f"{name}: not in the rank" for name in sorted(targets.keys() - params.keys())]
    for name in sorted(params.keys() & targets.keys()):
        p, t = params[name], targets[name]
        if p["dtype"].startswith("F8_"):  # its bytes: torch's float8 dtypes or uint8 (a torch without them)
            same_dtype = t.element_size() == 1
        else:
            same_dtype = torch_dtype(p["dtype"]) == t.dtype
        if tuple(p["shape"]) != tuple(t.shape):
            problems.append(f"{name}: shape {tuple(p['shape'])} != the module's {tuple(t.shape)}")
        elif not same_dtype:
            problems.append(f"{name}: dtype {p['dtype']} != the module's {t.dtype}")
        elif not t.is_contiguous():
            problems.append(f"{name}: not contiguous in the module")
    if problems:
        raise InvalidArgumentError("the rank does not fit the module: " + "; ".join(problems), field="state_dict",
                                   expected="the module's names, shapes and dtypes",
                                   found=f"{len(problems)} mismatch(es)")
    destinations = {}
    for name in params.keys() & targets.keys():
        t = targets[name]
        destinations[name] = (t.data_ptr(), t.numel() * t.element_size(), _device_index(t))
    with torch.no_grad():
        return _shardload.load_into_tensors(str(model), rank=rank, destinations=destinations, threads=threads,
                                            window_bytes=window_bytes, **layout)
