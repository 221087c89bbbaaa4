"""bench/run's peers: another safetensors loader reads a whole checkpoint (every tensor, unsharded: tp 1)
into tensors the caller owns, so that shardload's load of the same bytes can be compared with it.

    peers_load.py PEER MODEL_DIR [--prime MEMCPY_LIMIT BYTES] [--plan PLAN_JSON --verify CHECKSUMS]

Run by the producers' PyPI environment (scripts/pypi-env.sh tests/producers/requirements.lock), which
pins the peers' versions. PEER is one of:

  safetensors_load_file  safetensors.torch.load_file per file, then every tensor copied into a new
                         torch tensor. load_file (safetensors 0.8) hands out views of a private mmap
                         of the file: nothing is read until they are touched, and the views die with
                         the mapping, so an engine that keeps the weights copies them.
  safetensors_safe_open  safe_open(framework="pt") per file, get_tensor of every name, each copied as
                         it is taken (the engines' iterator: take a tensor, copy it into the parameter).
  fastsafetensors        fastsafe_open(files, nogds=True, device="cpu"): every file read into the
                         library's host buffers, get_tensor of every name copied out (get_tensor hands
                         out views of those buffers, which stay alive as long as any view does).
  runai_streamer         SafetensorsStreamer().stream_files(files) with its defaults (owned=True), every
                         tensor of get_tensors() kept as it comes: 0.17.1 gives each one a storage of
                         its own, which stays valid ("owned"), so there is nothing to copy. Checked on
                         every run (the first 64 tensors): were they views, this exits instead.

The copy, where there is one, is the same for all: torch.empty of the tensor's shape and dtype, then
copy_ on torch.set_num_threads(2) (shardload's loads use 2 threads). Each peer's own threads are its
defaults.
Timed: from the first open to the last tensor in owned memory, the loader's objects closed; not the
interpreter, the imports or listing the files. What the tensors handed out are (views of a file
mapping, views of a larger buffer, or tensors of their own) is looked up on the first 64, inside the
timed span (one read of /proc/self/maps, then the storage's size).

Prints one line: "<seconds> <tensor bytes> <cpu seconds> <copy seconds> <peak RSS KiB>
<RSS before the load KiB> <kept anon KiB> <kept file KiB> <tensors> <hands out>": copy seconds is the
part of the timed span spent in the copies; peak RSS is the process's (ru_maxrss: interpreter, imports
and mapped file pages included) at the end of the load; kept is RSS after the load less RSS before it,
anonymous and file-backed, with only the owned tensors left. Every run checks that every tensor of the
headers came back with its dtype and shape. --verify rebuilds the plan's parameters from the tensors
(bench/baselines/torch_load.py's assemble) and compares each one's XXH3-64 with `shardload load
--checksum` (afterwards, not timed), so a peer that returns wrong bytes fails instead of looking fast.
Exits 3 when the peer's package cannot be imported.

--prime runs `MEMCPY_LIMIT --prime --bytes BYTES` (touch and free 2 x BYTES) just before the timed span,
after the imports: on this VM (virtio-balloon free page reporting) memory freed a second or two before
is back at the host and costs several times more to touch again, and the interpreter and imports take
longer than that. bench/run primes shardload's process the same way, right before it starts.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines"))
os.environ.setdefault("RUNAI_STREAMER_LOG_LEVEL", "WARNING")  # its INFO lines are not results

import torch  # noqa: E402

from common import shard_headers, verify  # noqa: E402
from torch_load import DTYPES, assemble  # noqa: E402

NAMES = {dtype: name for name, dtype in DTYPES.items()}


def setup_safetensors_load_file():
    from safetensors.torch import load_file

    def load(files, own):
        out = {}
        for path in files:
            for name, tensor in load_file(path).items():
                out[name] = own(tensor)
        return out
    return load


def setup_safetensors_safe_open():
    from safetensors import safe_open

    def load(files, own):
        out = {}
        for path in files:
            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    out[name] = own(f.get_tensor(name))
        return out
    return load


def setup_fastsafetensors():
    from fastsafetensors import fastsafe_open

    def load(files, own):
        out = {}
        with fastsafe_open(files, nogds=True, device="cpu") as f:
            for name in f.keys():
                out[name] = own(f.get_tensor(name))
        return out
    return load


def setup_runai_streamer():
    from runai_model_streamer import SafetensorsStreamer

    def load(files, own):
        out = {}
        with SafetensorsStreamer() as streamer:
            streamer.stream_files(files)
            for name, tensor in streamer.get_tensors():
                out[name] = own(tensor)
        return out
    return load


SAMPLE = 64  # tensors looked at for hands_out: a few microseconds each, inside the timed span


def summary(kinds):
    """The kinds seen, most telling first: one view among owned tensors makes them views."""
    for kind in ("file-mapping-view", "buffer-view", "owned"):
        if kind in kinds:
            return kind
    return "none"


# Each peer: (set-up returning its load function, whether its tensors are copied into owned ones).
PEERS = {"safetensors_load_file": (setup_safetensors_load_file, True),
         "safetensors_safe_open": (setup_safetensors_safe_open, True),
         "fastsafetensors": (setup_fastsafetensors, True),
         "runai_streamer": (setup_runai_streamer, False)}


def memory_kib():
    """(RssAnon, RssFile) of this process in KiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0])
    return fields["RssAnon"], fields["RssFile"]


def hands_out(tensor, maps):
    """What a tensor handed out by the peer is: file-mapping-view (looked up in /proc/self/maps only
    when maps is set), buffer-view (its storage is larger than it) or owned."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") if maps else open(os.devnull) as f:
        for line in f:
            fields = line.split()
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if low <= address < high:
                if len(fields) >= 6 and fields[5].startswith("/"):
                    return "file-mapping-view"
                break
    storage = tensor.untyped_storage().nbytes()
    return "buffer-view" if storage > tensor.numel() * tensor.element_size() else "owned"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("model")
    parser.add_argument("--prime", nargs=2, metavar=("MEMCPY_LIMIT", "BYTES"))
    parser.add_argument("--plan")
    parser.add_argument("--verify")
    args = parser.parse_args()
    if bool(args.plan) != bool(args.verify):
        parser.error("--plan and --verify go together")
    torch.set_num_threads(2)
    try:
        setup, copies = PEERS[args.peer]
        load = setup()
    except ImportError as e:
        print(f"peers_load: {args.peer}: {e}", file=sys.stderr)
        sys.exit(3)
    files, expected = [], {}
    for path, header, _ in shard_headers(args.model):
        files.append(path)
        expected.update({name: (meta["dtype"], meta["shape"]) for name, meta in header.items()})

    copy_seconds = 0.0
    seen = []  # what the first SAMPLE tensors handed out are

    def own(tensor):
        nonlocal copy_seconds
        if len(seen) < SAMPLE:
            seen.append(hands_out(tensor, maps=not seen))
        if not copies:
            return tensor
        start = time.perf_counter()
        owned = torch.empty(tensor.shape, dtype=tensor.dtype)
        owned.copy_(tensor)
        copy_seconds += time.perf_counter() - start
        return owned

    if args.prime:
        subprocess.run([args.prime[0], "--prime", "--bytes", args.prime[1]], check=True)
    anon0, file0 = memory_kib()
    cpu0, start = os.times(), time.perf_counter()
    tensors = load(files, own)
    seconds, cpu1 = time.perf_counter() - start, os.times()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    anon1, file1 = memory_kib()

    got = {name: (NAMES.get(t.dtype, str(t.dtype)), list(t.shape)) for name, t in tensors.items()}
    if got != expected:
        wrong = sorted(n for n in expected.keys() | got.keys() if got.get(n) != expected.get(n))
        sys.exit(f"peers_load: {args.peer} returned {len(got)} tensors, the headers hold {len(expected)}; "
                 f"{len(wrong)} missing, extra or of another dtype or shape, first: {wrong[:3]}")
    if not copies and summary(seen) != "owned":
        sys.exit(f"peers_load: {args.peer} handed out a {summary(seen)}, which this run keeps uncopied")
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(f"{seconds:.4f} {nbytes} {cpu:.3f} {copy_seconds:.4f} {peak} {anon0 + file0} {anon1 - anon0} "
          f"{file1 - file0} {len(tensors)} {summary(seen)}", flush=True)
    if args.verify:
        with open(args.plan) as f:
            plan = json.load(f)
        sources = {}
        for name, t in tensors.items():
            rows = t.shape[0] if t.dim() else 1
            sources[name] = (NAMES[t.dtype], t.reshape(rows, -1))
        params = assemble(plan, sources)
        verify(params, args.verify, f"peers_load {args.peer}",
               lambda t: (t.data_ptr(), t.numel() * t.element_size()))


if __name__ == "__main__":
    main()
