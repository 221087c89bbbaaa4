"""Where `shardload.verify` gets rank tensors: an export directory, or a fresh export by the CLI.

Both return (ranks, layout): ranks[r] is {name: torch tensor} of rank r (FP8 weights as uint8 codes) and layout
is the export's shardload.json. The CLI path is a stand-in for the zero-copy extension: any loader that returns
the same pair can be passed to `verify.verify`.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

from .safetensors_io import MAX_HEADER_BYTES, SafetensorsError, SafetensorsFile, open_regular

_RANK_FILE = re.compile(r"model-rank-(\d+)-part-(\d+)\.safetensors")


def read_manifest(export_dir):
    path = os.path.join(str(export_dir), "shardload.json")
    with open(open_regular(path), "rb") as f:
        raw = f.read(MAX_HEADER_BYTES + 1)
    if len(raw) > MAX_HEADER_BYTES:
        raise SafetensorsError("manifest too large", file=path)
    try:
        layout = json.loads(raw)
    except ValueError:
        raise SafetensorsError("manifest is not JSON", file=path) from None
    if not isinstance(layout, dict) or layout.get("format") != "shardload/1":
        raise SafetensorsError("not a shardload/1 manifest", file=path, field="format", expected="shardload/1")
    for key in ("tp_size", "ep_size", "moe_tp_size"):
        if type(layout.get(key)) is not int or layout[key] < 1:
            raise SafetensorsError("missing or bad layout size", file=path, field=key)
    ranks = layout.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != layout["tp_size"]:
        raise SafetensorsError("ranks must list every rank", file=path, field="ranks",
                               expected=layout["tp_size"])
    return layout


def load_export(export_dir):
    """(ranks, layout) of an export directory; every rank file is parsed and checked against the manifest."""
    layout = read_manifest(export_dir)
    # verify reads layout.md's names and dtypes; an export written for an engine's sharded_state loader has
    # that engine's (docs/engines.md). FastDeploy's target is layout.md's layout.
    if layout.get("engine", "fastdeploy") != "fastdeploy":
        raise SafetensorsError("an export written for an engine (--engine) has the engine's names: verify reads "
                               "layout.md's", file="shardload.json", field="engine",
                               expected="no engine or fastdeploy", found=layout["engine"])
    ranks = []
    for r, entry in enumerate(layout["ranks"]):
        files = entry.get("files") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or entry.get("rank") != r or not isinstance(files, list) or not files:
            raise SafetensorsError("bad rank entry", file="shardload.json", field="ranks", expected=r)
        tensors = {}
        for fname in files:
            m = _RANK_FILE.fullmatch(fname) if isinstance(fname, str) else None
            if not m or int(m.group(1)) != r:
                raise SafetensorsError("rank file name is not model-rank-{r}-part-{k}.safetensors",
                                       file="shardload.json", field="files", expected=r)
            f = SafetensorsFile(os.path.join(str(export_dir), fname))
            if f.metadata.get("rank") != str(r):
                raise SafetensorsError("metadata rank disagrees with the file name", file=fname, field="rank",
                                       expected=r, found=f.metadata.get("rank"))
            for name in f.tensors:
                if name in tensors:
                    raise SafetensorsError("tensor in two parts of one rank", file=fname, tensor=name)
                tensors[name] = f.get(name)
        ranks.append(tensors)
    return ranks, layout


# The plan fields verify reads, as an export's shardload.json spells them.
_LAYOUT_FIELDS = ("tp_size", "ep_size", "moe_tp_size", "dp_size", "dp_style", "scopes", "physical_to_logical_map",
                  "quantization", "weight_strategy", "row_bias", "no_split_shared_experts")


def load_with_library(model_dir, layout_kwargs):
    """Loads MODEL with the extension (shardload.load, keywords as the command line's layout options):
    every rank's tensors as torch tensors sharing shardload's buffers, no file written."""
    from . import _shardload
    from .tensors import to_torch

    loaded = _shardload.load(str(model_dir), **layout_kwargs)
    plan = loaded.plan()
    layout = {key: plan[key] for key in _LAYOUT_FIELDS if key in plan}
    ranks = [{name: to_torch(t) for name, t in loaded.tensors(r).items()} for r in loaded.ranks]
    return ranks, layout


def shardload_binary():
    return os.environ.get("SHARDLOAD_BIN") or shutil.which("shardload") or "shardload"


def export_with_cli(model_dir, layout_args):
    """Exports MODEL with the CLI into a private temporary directory and loads it (the directory is removed)."""
    with tempfile.TemporaryDirectory(prefix="shardload-verify-") as tmp:
        out = os.path.join(tmp, "export")
        cmd = [shardload_binary(), "export", str(model_dir), "--out", out, *map(str, layout_args)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"shardload export failed ({done.returncode}): {done.stderr.strip()}")
        return load_export(out)
