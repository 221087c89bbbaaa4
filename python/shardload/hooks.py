"""Engine hooks: the checkpoint as (name, tensor) pairs for the engines' load_weights, and a rank's
tensors copied into a torch module in place."""
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
