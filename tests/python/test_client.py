"""shardload.client against real `shardload serve` processes on loopback: every tensor as the export
has it, views that share the server's memory and see updates in place, copies that are never torn
by an update running beside them, and a /dev/shm where someone else planted files."""
import gc
import hashlib
import fcntl
import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

import shardload

from conftest import engine_module, read_safetensors, run_shardload, shardload_bin
from shardload import client as shl
from shardload import engines
from shardload.errors import (ConflictError, Error, FormatError, InvalidArgumentError, IoError,
                              StaleReadError)

START_TIMEOUT = 180  # seconds; deadlines only catch hangs (a loaded machine, sanitizers)
REQUEST_TIMEOUT = 120
NOBODY = 65534
_names = itertools.count()


def unique_name(test):
    """A /dev/shm name no other test, process or parallel run uses."""
    return f"pyclient-{os.getpid()}-{test}-{next(_names)}"


def shm_path(name):
    return f"/dev/shm/shardload-{name}"


def remove_shm(name):
    """Removes /dev/shm/shardload-NAME whatever it is (a link is unlinked, not followed)."""
    path = shm_path(name)
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


# -- servers -------------------------------------------------------------------------------------

class Server:
    """A `shardload serve MODEL --tp 2 --ep 2 --name NAME --port 0 --threads 2 MORE...` child."""

    def __init__(self, model, name, more, log_dir):
        self.name = name
        self.dir = shm_path(name)
        self.out_path = log_dir / f"{name}.out"
        self.err_path = log_dir / f"{name}.err"
        args = [shardload_bin(), "serve", model, "--tp", "2", "--ep", "2", "--name", name, "--port", "0",
                "--threads", "2", *more]
        # Output to files: a pipe nobody reads could fill up and block the server.
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            self.port = self._wait_for_port()
        except BaseException:
            self.kill()
            raise

    def output(self):
        return f"stdout:\n{self.out_path.read_text()}\nstderr:\n{self.err_path.read_text()}"

    def _wait_for_port(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            # The whole line, so that a port half written is never read.
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)\n", self.out_path.read_text())
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode} before listening\n{self.output()}")
            time.sleep(0.02)
        pytest.fail(f"the server did not listen within {START_TIMEOUT} s\n{self.output()}")

    def stop(self):
        """SIGTERM, as an operator stops it; a clean exit removes its shared memory."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)
        return self.process.returncode

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)

    def api_key(self):
        """The key the server made, read as its user reads it (the client's own reader)."""
        with shl.connect(self.name) as c:
            return c.api_key()

    def post(self, path, body):
        headers = {"Content-Type": "application/json"}
        key = self.api_key()
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def update(self, model):
        status, body = self.post("/update_weights_from_disk", {"model_path": model})
        assert status == 200, body
        return body["version"]


@pytest.fixture
def serve(tmp_path):
    """serve(model, *more, name=None) -> Server; every server and its /dev/shm directory is gone
    when the test ends, passed or not."""
    servers, names = [], []

    def start(model, *more, name=None):
        names.append(name or unique_name("serve"))
        servers.append(Server(model, names[-1], list(more), tmp_path))
        return servers[-1]

    yield start
    for server in servers:
        server.kill()
    for name in names:
        remove_shm(name)


@pytest.fixture(scope="module")
def models(tiny):
    """Two qwen3_moe checkpoints whose every tensor differs, and an FP8 one."""
    return {"first": tiny("qwen3_moe", seed=41), "second": tiny("qwen3_moe", seed=42),
            "fp8": tiny("qwen3_moe", quant="fp8", seed=43)}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """exports(model) -> {rank: {name: bytes}}: the rank tensors of `shardload export --tp 2 --ep 2`,
    read from its safetensors files (the reference every client read is compared with)."""
    made = {}
    root = tmp_path_factory.mktemp("exports")

    def export(model):
        if model not in made:
            out = root / f"export-{len(made)}"
            run_shardload("export", model, "--tp", "2", "--ep", "2", "--out", out)
            manifest = json.loads((out / "shardload.json").read_text())
            made[model] = {}
            for rank in manifest["ranks"]:
                tensors = made[model].setdefault(rank["rank"], {})
                for file in rank["files"]:
                    tensors.update({name: raw for name, (_, _, raw) in read_safetensors(out / file).items()})
        return made[model]

    return export


@pytest.fixture(scope="module")
def shared_server(models, tmp_path_factory):
    """One server on the first model for the tests that only read (none updates it)."""
    name = unique_name("shared")
    server = None
    try:
        server = Server(models["first"], name, [], tmp_path_factory.mktemp("shared-server"))
        yield server
        assert server.stop() == 0, server.output()
    finally:
        if server is not None:
            server.kill()
        remove_shm(name)


@pytest.fixture
def connected(shared_server):
    with shl.connect(shared_server.name) as c:
        yield c


def raw(t):
    """The bytes of a tensor (bfloat16 through its int16 bits)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def mappings_of(path):
    """The address ranges of this process mapping `path`."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == path:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                out.append((start, end, int(fields[2], 16)))
    return out


def empty_targets(c, ranks=None, fill=None):
    """{rank: {name: new tensor}} shaped as the manifest says, for every tensor of `ranks`."""
    out = {}
    for r in ranks if ranks is not None else range(c.ranks):
        out[r] = {}
        for name, view in c.tensors(r).items():
            target = torch.empty_like(view)
            if fill is not None:
                target.view(torch.uint8 if target.element_size() == 1 else torch.int16
                            if target.element_size() == 2 else torch.int32
                            if target.element_size() == 4 else torch.int64).fill_(fill)
            out[r][name] = target
    return out


def digest(targets):
    """{(rank, name): sha256 of the bytes} of copy targets or expected bytes."""
    return {(r, name): hashlib.sha256(t if isinstance(t, bytes) else raw(t)).hexdigest()
            for r, named in targets.items() for name, t in named.items()}


# -- reading -------------------------------------------------------------------------------------

def test_every_tensor_equals_the_export(connected, models, exports):
    expected = exports(models["first"])
    c = connected
    assert (c.tp_size, c.ep_size, c.ranks, c.version, c.update_in_progress) == (2, 2, 2, 0, False)
    assert c.manifest["format"] == "shardload-shm/1"
    for r in range(c.ranks):
        views = c.tensors(r)
        assert sorted(views) == sorted(expected[r])
        for name, view in views.items():
            entry = c.manifest["ranks"][r]["tensors"][name]
            assert list(view.shape) == entry["shape"] and view.shardload_dtype == entry["dtype"]
            assert view.dtype == {"BF16": torch.bfloat16, "F32": torch.float32}[entry["dtype"]], name
            assert raw(view) == expected[r][name], f"rank {r} {name}"
            assert c.numpy(r, name, bits=True).tobytes() == expected[r][name]


def test_views_are_the_mapping_itself(connected):
    c = connected
    rank_file = os.path.join(c.path, "rank-1.bin")
    for name in c.names(1):
        first, second = c.tensor(1, name), c.tensor(1, name)
        assert first.data_ptr() == second.data_ptr() == c.numpy(1, name, bits=True).ctypes.data
        # Inside this process's read-only mapping of rank-1.bin, at the manifest's offset.
        [(start, end, file_offset)] = [m for m in mappings_of(rank_file) if m[0] <= first.data_ptr() < m[1]]
        assert first.data_ptr() - start + file_offset == c.manifest["ranks"][1]["tensors"][name]["offset"]
    array = c.numpy(1, c.names(1)[0], bits=True)
    assert not array.flags.writeable
    with pytest.raises(ValueError):
        array[...] = 0


def test_bf16_needs_bits_in_numpy(connected):
    c = connected
    bf16 = next(n for n in c.names(0) if c.dtype(0, n) == "BF16")
    f32 = next(n for n in c.names(0) if c.dtype(0, n) == "F32")
    with pytest.raises(InvalidArgumentError, match="numpy has no bfloat16") as error:
        c.numpy(0, bf16)
    assert error.value.tensor == bf16 and error.value.found == "BF16"
    assert c.numpy(0, bf16, bits=True).dtype == np.uint16
    assert c.numpy(0, f32).dtype == np.float32


def test_unknown_ranks_and_tensors_are_named(connected):
    c = connected
    with pytest.raises(InvalidArgumentError, match="no such rank") as error:
        c.tensor(2, c.names(0)[0])
    assert error.value.field == "rank" and error.value.expected == "0 to 1"
    with pytest.raises(InvalidArgumentError, match="no such tensor") as error:
        c.tensor(0, "model.layers.99.mlp.gate.weight")
    assert error.value.tensor == "model.layers.99.mlp.gate.weight"


def test_views_outlive_the_client(shared_server, models, exports):
    rank_file = os.path.join(shared_server.dir, "rank-0.bin")
    gc.collect()  # views of earlier tests caught in reference cycles
    before = len(mappings_of(rank_file))
    c = shl.connect(shared_server.name)
    name = c.names(0)[-1]
    view = c.tensor(0, name)
    c.close()
    del c
    gc.collect()
    # Memory the process reuses now must not land where the view points.
    scratch = [torch.full((1 << 20,), 7, dtype=torch.int32) for _ in range(8)]
    assert raw(view) == exports(models["first"])[0][name]
    assert len(mappings_of(rank_file)) == before + 1
    del view, scratch
    gc.collect()
    assert len(mappings_of(rank_file)) == before  # the last view unmapped it

    with shl.connect(shared_server.name) as c:  # without views, close() unmaps at once
        assert len(mappings_of(rank_file)) == before + 1
    assert len(mappings_of(rank_file)) == before

    # A client dropped without close() leaves neither mappings nor descriptors behind.
    descriptors = len(os.listdir("/proc/self/fd"))
    c = shl.connect(shared_server.name)
    c.tensors(1)
    del c
    gc.collect()
    assert len(mappings_of(rank_file)) == before and len(os.listdir("/proc/self/fd")) == descriptors


# -- copies --------------------------------------------------------------------------------------

def test_copy_into_names_every_mismatch_before_copying(connected):
    c = connected
    names = c.names(0)
    f32 = next(n for n in names if c.dtype(0, n) == "F32")
    good = torch.full(c.tensor(0, names[0]).shape, 3.0, dtype=torch.bfloat16)
    targets = {
        names[0]: good,
        names[1]: torch.empty(7, 7, dtype=torch.bfloat16),  # shape
        f32: torch.empty(c.tensor(0, f32).shape, dtype=torch.float16),  # dtype
        "model.layers.99.mlp.gate.weight": torch.empty(1),  # not in the manifest
        names[2]: np.zeros(c.tensor(0, names[2]).shape),  # not a torch tensor
        names[3]: c.tensor(0, names[3]),  # the read-only mapping itself
    }
    with pytest.raises(InvalidArgumentError, match="5 target") as error:
        c.copy_into(targets, rank=0)
    message = str(error.value)
    for name in (names[1], f32, "model.layers.99.mlp.gate.weight", names[2], names[3]):
        assert f"'{name}'" in message
    assert "shape [7, 7]" in message and "torch.float16" in message and "read-only mapping" in message
    assert torch.equal(good, torch.full_like(good, 3.0)), "a target was written before the checks"

    with pytest.raises(InvalidArgumentError, match="no such rank"):
        c.copy_into({2: {names[0]: good}})
    with pytest.raises(InvalidArgumentError, match="non-empty dict"):
        c.copy_into({}, rank=0)


def test_copy_into_refuses_targets_it_cannot_fill(connected):
    """A meta tensor (nothing to copy into), an expanded stride-0 view and an as_strided one whose
    elements share memory, two targets sharing memory, a read-only NumPy array: each refused by name,
    before any target is written."""
    c = connected
    names = [n for n in c.names(0) if c.dtype(0, n) == "BF16" and len(c.tensor(0, n).shape) == 2]
    shape = lambda n: tuple(c.tensor(0, n).shape)
    good = torch.full(shape(names[0]), 3.0, dtype=torch.bfloat16)
    rows, cols = shape(names[2])
    pool = torch.full((2 * rows * cols,), 5.0, dtype=torch.bfloat16)
    targets = {
        names[0]: good,
        names[1]: torch.empty(shape(names[1]), dtype=torch.bfloat16, device="meta"),
        names[2]: torch.zeros(1, cols, dtype=torch.bfloat16).expand(rows, cols),
        names[3]: torch.zeros(rows * cols, dtype=torch.bfloat16).as_strided(shape(names[3]), (1, 1)),
        names[4]: np.zeros(shape(names[4]), dtype=np.int16),
    }
    targets[names[4]].flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="4 target") as error:
        c.copy_into(targets, rank=0)
    message = str(error.value)
    assert f"'{names[1]}': a meta tensor" in message
    assert f"'{names[2]}': its elements share memory" in message and f"'{names[3]}': its elements" in message
    assert f"'{names[4]}': a NumPy array: a read-only one" in message
    assert torch.equal(good, torch.full_like(good, 3.0)), "a target was written before the checks"

    # Two targets over one memory (the second starts inside the first), and the same tensor twice.
    a = pool[: rows * cols].view(rows, cols)
    b = pool[cols: cols + rows * cols].view(rows, cols)
    same_shape = [n for n in names if shape(n) == (rows, cols)]
    if len(same_shape) >= 2:
        with pytest.raises(InvalidArgumentError, match="share memory") as error:
            c.copy_into({same_shape[0]: a, same_shape[1]: b}, rank=0)
        assert f"'{same_shape[0]}'" in str(error.value) and f"'{same_shape[1]}'" in str(error.value)
        assert torch.equal(pool, torch.full_like(pool, 5.0)), "a target was written before the checks"
    with pytest.raises(InvalidArgumentError, match="share memory"):
        c.copy_into({0: {names[0]: good}, 1: {names[0]: good}})
    # Two halves of one matrix, interleaved by columns, share no byte: they are filled.
    wide = torch.zeros(rows, 2 * cols, dtype=torch.bfloat16)
    if len(same_shape) >= 2:
        assert c.copy_into({same_shape[0]: wide[:, :cols], same_shape[1]: wide[:, cols:]}, rank=0) == c.version
        assert torch.equal(wide[:, :cols], c.tensor(0, same_shape[0]))
        assert torch.equal(wide[:, cols:], c.tensor(0, same_shape[1]))


def test_copy_into_one_rank_and_several(connected, models, exports):
    c = connected
    expected = exports(models["first"])
    one = empty_targets(c, [1], fill=0x55)
    assert c.copy_into(one[1], rank=1) == 0
    assert digest(one) == digest({1: expected[1]})
    both = empty_targets(c, fill=0x55)
    assert c.copy_into(both) == 0
    assert digest(both) == digest(expected)
    # Parameters of a model (leaves that require grad) are copied into in place, as load_weights does.
    name = c.names(0)[0]
    param = torch.nn.Parameter(torch.zeros(c.tensor(0, name).shape, dtype=torch.bfloat16))
    pointer = param.data_ptr()
    c.copy_into({name: param}, rank=0)
    assert raw(param) == expected[0][name] and param.data_ptr() == pointer


# Run in a child: before the check, a copy into read-only memory killed the interpreter (SIGSEGV).
_READ_ONLY_TARGETS = r"""
import mmap, sys, warnings
import numpy as np, torch
from shardload import client as shl
from shardload import engines
from shardload.errors import InvalidArgumentError
name = sys.argv[1]
reader = shl.connect(name)
tensor = reader.names(0)[0]
view = reader.tensor(0, tensor)
shape, dtype, nbytes = view.shape, view.dtype, view.numel() * view.element_size()
other = shl.connect(name)
closed = shl.connect(name)
closed_view = closed.tensor(0, tensor)
closed.close()
anonymous = mmap.mmap(-1, nbytes, prot=mmap.PROT_READ)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # torch: the array is not writeable (the point)
    read_only = torch.from_numpy(np.frombuffer(anonymous, dtype=np.uint8))
cases = {"another client's view": other.tensor(0, tensor), "a closed client's view": closed_view,
         "a PROT_READ mapping": read_only.view(dtype).reshape(shape)}
for what, target in cases.items():
    try:
        reader.copy_into({tensor: target}, rank=0)
        print(f"{what}: copied")
    except InvalidArgumentError as e:
        assert "not writable" in str(e), str(e)
        print(f"{what}: refused")
# A writable target beside them still copies.
good = torch.empty(shape, dtype=dtype)
print("writable:", reader.copy_into({tensor: good}, rank=0))
"""


def test_copy_into_read_only_memory_is_refused(shared_server):
    child = subprocess.run([sys.executable, "-c", _READ_ONLY_TARGETS, shared_server.name], capture_output=True,
                           text=True, timeout=REQUEST_TIMEOUT)
    assert child.returncode == 0, f"exit {child.returncode}\n{child.stdout}\n{child.stderr}"
    assert child.stdout.splitlines() == ["another client's view: refused", "a closed client's view: refused",
                                         "a PROT_READ mapping: refused", "writable: 0"], child.stdout

def test_an_update_rewrites_views_in_place(serve, models, exports):
    server = serve(models["first"])
    with shl.connect(server.name) as c:
        views = {r: c.tensors(r) for r in range(c.ranks)}
        pointers = {(r, n): v.data_ptr() for r in views for n, v in views[r].items()}
        assert digest(views) == digest(exports(models["first"]))

        assert server.update(models["second"]) == 1
        assert c.version == 1 and not c.update_in_progress
        assert digest(views) == digest(exports(models["second"]))
        assert {(r, n): v.data_ptr() for r in views for n, v in views[r].items()} == pointers

        targets = empty_targets(c)
        assert c.copy_into(targets) == 1
        assert digest(targets) == digest(exports(models["second"]))
        assert c.manifest["version"] == 1  # the client caught up with the new manifest


def copies_beside_updates(server, c, models, updates):
    """Updates the server `updates` times (the second model, the first, ...) on another thread while `c`
    copies every tensor again and again; returns the updates' versions (or the error that stopped them)
    and every copy as (version, digest), the last one taken after the updates ended."""
    results = []

    def update_again_and_again():
        try:
            for i in range(updates):
                results.append(server.update(models["second"] if i % 2 == 0 else models["first"]))
        except BaseException as e:  # reported by the main thread
            results.append(e)

    targets = empty_targets(c)
    updater = threading.Thread(target=update_again_and_again)
    updater.start()
    copies = []
    try:
        while True:
            done = not updater.is_alive()
            version = c.copy_into(targets, timeout=REQUEST_TIMEOUT)
            copies.append((version, digest(targets)))
            if done:
                break
    finally:
        updater.join(timeout=REQUEST_TIMEOUT * updates)
    return results, copies


def test_copies_beside_updates_are_never_torn(serve, models, exports):
    # Many commit groups per update (--staging-bytes): a reader trusting the sequence words alone
    # would copy between two groups and mix old and new tensors.
    server = serve(models["first"], "--staging-bytes", "256K")
    by_version = {0: digest(exports(models["first"])), 1: digest(exports(models["second"]))}
    assert by_version[0].keys() == by_version[1].keys()
    assert all(by_version[0][k] != by_version[1][k] for k in by_version[0]), "the two models share a tensor"
    updates = 6
    with shl.connect(server.name) as c:
        results, copies = copies_beside_updates(server, c, models, updates)
    assert results == list(range(1, updates + 1))
    assert copies[-1][0] == updates
    for version, copied in copies:
        # Version v holds the second model when v is odd: every tensor of the copy is of it.
        expected = by_version[version % 2]
        mixed = [k for k in copied if copied[k] != expected[k]]
        assert not mixed, f"a copy of version {version} has {len(mixed)} tensors of another version"


def test_a_double_buffered_server_is_copied_whole_beside_its_updates(serve, models, exports):
    # serve --double-buffer: each update is written into the slot readers do not read and published
    # by switching the active slot word; copy_into follows the switch, and every copy is one version.
    server = serve(models["first"], "--double-buffer")
    by_version = {0: digest(exports(models["first"])), 1: digest(exports(models["second"]))}
    updates = 20
    with shl.connect(server.name) as c:
        assert c.manifest["format"] == "shardload-shm/2" and c.manifest["slots"] == 2
        before = {r: c.tensors(r) for r in range(c.ranks)}  # slot 0, the first model
        results, copies = copies_beside_updates(server, c, models, updates)
        assert results == list(range(1, updates + 1))
        assert copies[-1][0] == updates
        for version, copied in copies:
            assert copied == by_version[version % 2], f"a copy of version {version} is not that version"
        # One more update: slot 1 is live. Views taken now show it; views taken before show slot 0.
        assert server.update(models["second"]) == updates + 1
        assert digest({r: c.tensors(r) for r in range(c.ranks)}) == by_version[1]
        assert digest(before) == by_version[0]


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["ranks"][0].update(slot_bytes=m["ranks"][0]["slot_bytes"] + 4096), "slot_bytes"),
    (lambda m: m["ranks"][0].update(slot_bytes=m["ranks"][0]["slot_bytes"] - 1), "slot_bytes"),
    (lambda m: m.update(slots=3), "slots"),
    (lambda m: _first_tensor(m).update(offset=4096 + m["ranks"][0]["slot_bytes"]), "offset"),
], ids=["slot_size", "slot_not_pages", "slots", "offset_in_slot_1"])
def test_a_double_buffered_manifest_pointing_outside_its_slots_is_refused(serve, models, edit, field):
    server = serve(models["first"], "--double-buffer")
    _edit_manifest(server.name, edit)
    with pytest.raises(FormatError) as error:
        shl.connect(server.name)
    assert field in error.value.field


def test_an_active_slot_word_that_names_no_slot_is_refused(serve, models):
    server = serve(models["first"], "--double-buffer")
    with shl.connect(server.name) as c:
        path = os.path.join(shm_path(server.name), "rank-0.bin")
        with open(path, "r+b") as f:
            f.seek(32)
            f.write((12345).to_bytes(8, "little"))
        with pytest.raises(FormatError, match="active slot"):
            c.tensor(0, c.names(0)[0])
        with pytest.raises(FormatError, match="active slot"):
            c.copy_into(empty_targets(c))


class UpdateOnCopy(torch.Tensor):
    """A target whose first copy_ runs `hook` (a whole update of the server) before copying: an
    update that lands in the middle of a copy, every time."""

    hook = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.copy_ and UpdateOnCopy.hook is not None:
            hook, UpdateOnCopy.hook = UpdateOnCopy.hook, None
            hook()
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_copy_into_device_tensors(connected, models, exports):
    c = connected
    targets = {r: {n: torch.empty(v.shape, dtype=v.dtype, device="cuda") for n, v in c.tensors(r).items()}
               for r in range(c.ranks)}
    assert c.copy_into(targets) == 0
    assert digest(targets) == digest(exports(models["first"]))


def test_a_copy_overtaken_by_an_update_is_retried(serve, models, exports):
    # The flags were clear when the copy began; the update commits after rank 0 and part of rank 1
    # were copied. Only the words read again after the copy tell, and the copy is made again.
    server = serve(models["first"])
    with shl.connect(server.name) as c:
        targets = empty_targets(c)
        middle = c.names(1)[len(c.names(1)) // 2]
        targets[1][middle] = targets[1][middle].as_subclass(UpdateOnCopy)
        versions = []
        UpdateOnCopy.hook = lambda: versions.append(server.update(models["second"]))
        try:
            assert c.copy_into(targets) == 1
        finally:
            UpdateOnCopy.hook = None
        assert versions == [1]
        assert digest(targets) == digest(exports(models["second"]))


def _fake_directory(shared_server, spoil_header=None):
    """A copy of the shared server's directory under a new name, files and manifest as the server
    wrote them (the manifest's name made the new one); `spoil_header(rank, header bytearray)` may
    change a rank file's header words. Returns the name and a descriptor holding the directory's
    lock as a running server does (the client maps only directories a live server holds)."""
    name = unique_name("fake")
    path = shm_path(name)
    os.mkdir(path, 0o700)
    lock_fd = os.open(os.path.join(path, "server.alive"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.fcntl(lock_fd, 37, struct.pack("@hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))  # F_OFD_SETLK
    for entry in os.listdir(shared_server.dir):
        if entry in ("server.lock", "server.alive", "api-key"):
            continue
        data = bytearray(pathlib.Path(shared_server.dir, entry).read_bytes())
        if entry == "manifest.json":
            manifest = json.loads(data)
            manifest["name"] = name
            data = json.dumps(manifest).encode()
        elif spoil_header is not None:
            spoil_header(int(entry[5:-4]), data)
        fd = os.open(os.path.join(path, entry), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.close(fd)
    return name, lock_fd


@pytest.fixture
def fake(shared_server):
    """fake(spoil_header=None) -> name of a copied directory, held as a server holds it and removed
    when the test ends."""
    made = []

    def make(spoil_header=None):
        made.append(_fake_directory(shared_server, spoil_header))
        return made[-1][0]

    yield make
    for name, lock_fd in made:
        os.close(lock_fd)
        remove_shm(name)


def _set_word(rank, index, value):
    def spoil(r, data):
        if r == rank:
            data[8 * index:8 * index + 8] = value.to_bytes(8, "little")
    return spoil


@pytest.mark.parametrize("word, value", [(3, 1), (1, 7)], ids=["update_in_progress", "odd_sequence"])
def test_a_copy_that_never_settles_names_the_rank(fake, word, value):
    name = fake(_set_word(1, word, value))
    with shl.connect(name, timeout=0.2) as c:
        targets = empty_targets(c)
        with pytest.raises(StaleReadError, match="rank 1") as error:
            c.copy_into(targets)
        assert isinstance(error.value, TimeoutError)
        assert error.value.file.endswith("/rank-1.bin")
        # Rank 0 alone is settled; bounded by tries as well as by time.
        assert c.copy_into(targets[0], rank=0) == 0
        with pytest.raises(StaleReadError, match="3 tries"):
            c.copy_into(targets[1], rank=1, retries=3, timeout=REQUEST_TIMEOUT)


# -- a hostile /dev/shm --------------------------------------------------------------------------

def _replace_by_link(name, entry, tmp_path):
    path = os.path.join(shm_path(name), entry)
    moved = tmp_path / entry
    shutil.copyfile(path, moved)
    os.unlink(path)
    os.symlink(moved, path)


def test_a_copied_directory_is_accepted(fake):
    # The baseline of the refusals below: the same files, untouched, are fine.
    with shl.connect(fake()) as c:
        assert c.copy_into(empty_targets(c)) == 0


@pytest.mark.parametrize("entry", ["manifest.json", "rank-0.bin"])
def test_a_symbolic_link_in_place_of_a_file_is_refused(fake, tmp_path, entry):
    name = fake()
    _replace_by_link(name, entry, tmp_path)
    with pytest.raises(IoError, match="symbolic link") as error:
        shl.connect(name)
    assert error.value.file == os.path.join(shm_path(name), entry)


def test_a_symbolic_link_in_place_of_the_directory_is_refused(fake):
    target = shm_path(fake())
    name = unique_name("dirlink")
    os.symlink(target, shm_path(name))
    try:
        with pytest.raises(IoError, match="symbolic link"):
            shl.connect(name)
    finally:
        os.unlink(shm_path(name))


def test_a_fifo_in_place_of_the_manifest_is_refused_without_blocking(fake):
    name = fake()
    os.unlink(os.path.join(shm_path(name), "manifest.json"))
    os.mkfifo(os.path.join(shm_path(name), "manifest.json"), 0o600)
    with pytest.raises(IoError, match="not a regular file"):
        shl.connect(name)


def test_a_hard_link_to_a_rank_file_is_refused(fake, tmp_path):
    name = fake()
    os.link(os.path.join(shm_path(name), "rank-1.bin"), os.path.join(shm_path(name), "extra"))
    with pytest.raises(IoError, match="several names"):
        shl.connect(name)


def test_a_directory_others_may_write_is_refused(fake):
    name = fake()
    os.chmod(shm_path(name), 0o777)
    with pytest.raises(IoError, match="someone else") as error:
        shl.connect(name)
    assert "mode 0777" in error.value.found


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (as in CI)")
def test_a_directory_of_another_user_is_refused():
    name = unique_name("foreign")
    try:
        made = subprocess.run(["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                               "mkdir", "-m", "0700", shm_path(name)], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        with pytest.raises(IoError, match="someone else") as error:
            shl.connect(name)
        assert f"uid {NOBODY}" in error.value.found and f"uid {os.geteuid()}" in error.value.expected
        # Naming that user as the owner (a --shm-group reader of another user's server) gets past
        # the owner check, to the next refusal: no running server holds that directory.
        with pytest.raises(IoError, match="no running server holds"):
            shl.connect(name, owner=NOBODY)
    finally:
        remove_shm(name)


READER = """
import json, sys, torch
from shardload import client
from shardload.errors import IoError
name = sys.argv[1]
try:
    client.connect(name)
    refused = ""
except IoError as e:
    refused = str(e)
with client.connect(name, owner=0) as c:
    targets = {r: {n: torch.empty_like(v) for n, v in c.tensors(r).items()} for r in range(c.ranks)}
    version = c.copy_into(targets)
    out = {f"{r}/{n}": (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes().hex()
           for r in targets for n, t in targets[r].items()}
print(json.dumps({"refused": refused, "version": version, "tensors": out}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (as in CI)")
def test_a_shm_group_reader_of_another_user(serve, models, exports):
    # The server runs as root with --shm-group nogroup; the reader is nobody/nogroup, in another
    # process, and trusts root's files only because it names root as their owner.
    server = serve(models["first"], "--shm-group", "nogroup")
    package = pathlib.Path(tempfile.mkdtemp(prefix="shardload-client-"))
    try:
        # The client alone (no extension), where nobody can read it.
        (package / "shardload").mkdir()
        (package / "shardload" / "__init__.py").write_text("")
        for module in ("client.py", "errors.py", "tensors.py"):
            shutil.copyfile(pathlib.Path(shl.__file__).with_name(module), package / "shardload" / module)
        for path in (package, package / "shardload", *(package / "shardload").iterdir()):
            os.chmod(path, 0o755)
        reader = subprocess.run(
            ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
             "-c", READER, server.name],
            capture_output=True, text=True, timeout=START_TIMEOUT,
            env={"PYTHONPATH": str(package), "HOME": str(package), "PATH": os.environ.get("PATH", "")})
        assert reader.returncode == 0, reader.stderr
        result = json.loads(reader.stdout)
    finally:
        shutil.rmtree(package)
    assert "someone else" in result["refused"] and "uid 0" in result["refused"]
    assert result["version"] == 0
    expected = exports(models["first"])
    assert result["tensors"] == {f"{r}/{n}": b.hex() for r in expected for n, b in expected[r].items()}


SECRET = "TOP-SECRET-PAYLOAD"


@pytest.mark.parametrize("content, match", [
    (b"\xff\xfe" + SECRET.encode(), "not UTF-8"),
    (f'{{"format": "shardload-shm/1", "{SECRET}": '.encode(), "not JSON"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
    (json.dumps({"format": SECRET}).encode(), "not a valid weight server manifest"),
    (json.dumps([SECRET]).encode(), "not a valid weight server manifest"),
], ids=["binary", "truncated", "deep", "format", "array"])
def test_a_manifest_that_does_not_parse_is_refused_without_its_bytes(fake, content, match):
    name = fake()
    pathlib.Path(shm_path(name), "manifest.json").write_bytes(content)
    with pytest.raises(FormatError, match=match) as error:
        shl.connect(name)
    assert SECRET not in str(error.value) and SECRET not in repr(error.value.__dict__)
    assert error.value.file.endswith("manifest.json")


def test_a_huge_manifest_is_refused_unread(fake):
    name = fake()
    with open(os.path.join(shm_path(name), "manifest.json"), "r+b") as manifest:
        manifest.truncate(shl.MAX_MANIFEST_BYTES + 1)  # a hole: no memory or disk
    with pytest.raises(FormatError, match="too large"):
        shl.connect(name)


def _edit_manifest(name, edit):
    path = pathlib.Path(shm_path(name), "manifest.json")
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _first_tensor(manifest, rank=0):
    return next(iter(manifest["ranks"][rank]["tensors"].values()))


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["ranks"][0].update(file="../../etc/passwd"), "ranks[0].file"),
    (lambda m: _first_tensor(m).update(offset=m["ranks"][0]["bytes"]), "offset"),
    (lambda m: _first_tensor(m).update(offset=8), "offset"),
    (lambda m: _first_tensor(m).update(nbytes=_first_tensor(m)["nbytes"] * 2), "nbytes"),
    (lambda m: _first_tensor(m).update(dtype="F4"), "dtype"),
    (lambda m: _first_tensor(m).update(shape=[-1]), "shape"),
    (lambda m: m["ranks"][1].update(bytes=m["ranks"][1]["bytes"] + 4096), "bytes"),
    (lambda m: m.update(name="another"), "name"),
], ids=["file", "offset_past_end", "offset_in_header", "nbytes", "dtype", "shape", "bytes", "name"])
def test_a_manifest_pointing_outside_its_files_is_refused(fake, edit, field):
    name = fake()
    _edit_manifest(name, edit)
    with pytest.raises(FormatError) as error:
        shl.connect(name)
    assert field in error.value.field


def test_a_file_without_the_magic_is_refused(fake):
    name = fake(lambda r, data: data.__setitem__(slice(0, 8), b"NOTSHLD!"))
    with pytest.raises(FormatError, match="bad magic"):
        shl.connect(name)


def test_names_that_leave_dev_shm_and_absent_servers(tmp_path):
    for bad in ("../etc", "a/b", "", "x" * 101, 7):
        with pytest.raises(InvalidArgumentError, match="bad shared-memory name"):
            shl.connect(bad)
    with pytest.raises(IoError, match="is `shardload serve --name nobody-here` running"):
        shl.connect("nobody-here", root=str(tmp_path))


# -- FP8 and restarts ----------------------------------------------------------------------------

def test_fp8_tensors_are_bytes_with_their_dtype_name(serve, models, exports):
    server = serve(models["fp8"])
    expected = exports(models["fp8"])
    with shl.connect(server.name) as c:
        fp8 = [n for n in c.names(0) if c.dtype(0, n) == "F8_E4M3"]
        assert fp8
        view = c.tensor(0, fp8[0])
        assert view.dtype == torch.uint8 and view.shardload_dtype == "F8_E4M3"
        assert raw(view) == expected[0][fp8[0]]
        assert c.numpy(0, fp8[0]).dtype == np.uint8
        if hasattr(torch, "float8_e4m3fn"):
            as_float = shl.as_float8(view)
            assert as_float.dtype == torch.float8_e4m3fn and as_float.data_ptr() == view.data_ptr()
            target = torch.empty(view.shape, dtype=torch.float8_e4m3fn)
        else:
            with pytest.raises(InvalidArgumentError, match="has no float8_e4m3fn"):
                shl.as_float8(view)
            target = torch.empty_like(view)
        c.copy_into({fp8[0]: target}, rank=0)
        assert raw(target.view(torch.uint8)) == expected[0][fp8[0]]
        bf16 = next(n for n in c.names(0) if c.dtype(0, n) == "BF16")
        with pytest.raises(InvalidArgumentError, match="not FP8"):
            shl.as_float8(c.tensor(0, bf16))


def test_compressed_tensors_fp8_is_served_and_updated_in_place(serve, tiny, exports):
    # llm-compressor's per-channel FP8: the served ranks are the export's, an update from a second such
    # checkpoint rewrites them in place, and a checkpoint of another scheme (per-tensor scales, whose
    # weight_scale shapes differ) is refused with nothing changed.
    first, second = tiny("qwen3_moe", "ct-fp8-channel", seed=51), tiny("qwen3_moe", "ct-fp8-channel", seed=52)
    server = serve(first)
    with shl.connect(server.name) as c:
        views = {r: c.tensors(r) for r in range(c.ranks)}
        pointers = {(r, n): v.data_ptr() for r in views for n, v in views[r].items()}
        assert any(n.endswith("w13_weight_scale") for n in views[0])
        assert digest(views) == digest(exports(first))
        assert server.update(second) == 1
        assert digest(views) == digest(exports(second))
        assert {(r, n): v.data_ptr() for r in views for n, v in views[r].items()} == pointers
        status, body = server.post("/update_weights_from_disk",
                                   {"model_path": tiny("qwen3_moe", "ct-fp8-tensor", seed=53)})
        assert status == 400 and "another quantization" in json.dumps(body), body
        assert c.version == 1 and digest(views) == digest(exports(second))


def test_a_restarted_server_is_mapped_again_by_refresh(serve, models, exports):
    name = unique_name("restart")
    first = serve(models["first"], name=name)
    with shl.connect(name) as c:
        old = c.tensor(0, c.names(0)[0])
        targets = empty_targets(c)
        assert c.refresh() is False  # nothing changed: the same mappings
        assert first.stop() == 0, first.output()
        with pytest.raises(ConflictError, match="refresh"):
            c.copy_into(targets)

        serve(models["second"], name=name)
        assert c.refresh() is True
        assert c.version == 0  # a fresh directory starts again at 0
        assert c.copy_into(targets) == 0
        assert digest(targets) == digest(exports(models["second"]))
        # A view taken before keeps the bytes of its own, old mapping.
        assert raw(old) == exports(models["first"])[0][c.names(0)[0]]


def test_a_directory_no_running_server_holds_is_never_mapped(serve, models):
    """A directory kept by --keep after its server stopped still has a manifest and rank files, but
    no server holds its lock: connect refuses it, and maps it again once a server holds it."""
    name = unique_name("kept")
    server = serve(models["first"], "--keep", name=name)
    with shl.connect(name) as c:
        assert c.version == 0
    assert server.stop() == 0, server.output()
    assert os.path.exists(os.path.join(shm_path(name), "manifest.json"))
    with pytest.raises(IoError, match="no running server holds"):
        shl.connect(name)
    serve(models["first"], "--keep", name=name)
    with shl.connect(name) as c:
        assert c.version == 0


def test_a_polling_reader_never_stops_a_server_from_starting(serve, models):
    """connect() tells a live server by its lock without taking any: a reader polling it while the
    server restarts again and again never makes a start fail ("another shardload serve is using the
    name": 2 restarts in 15 when the probe took a shared lock)."""
    name = unique_name("probe")
    stop = threading.Event()
    probes = [0]

    def poll():
        while not stop.is_set():
            try:
                shl.connect(name).close()
            except (IoError, FormatError, ConflictError):
                pass
            probes[0] += 1

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for _ in range(8):
            server = serve(models["first"], "--keep", name=name)  # a start that fails fails the test
            assert server.stop() == 0, server.output()
    finally:
        stop.set()
        reader.join()
    assert probes[0] > 0


def test_the_client_reads_the_servers_api_key(serve, models):
    server = serve(models["first"])
    with shl.connect(server.name) as c:
        key = c.api_key()
        assert re.fullmatch(r"[0-9a-f]{64}", key)
        assert c.auth_headers() == {"Authorization": f"Bearer {key}"}
    status, body = server.post("/update_weights_from_disk", {"model_path": models["second"]})
    assert status == 200 and body["version"] == 1, body
    opened = serve(models["first"], "--insecure-no-api-key")
    with shl.connect(opened.name) as c:
        assert c.api_key() is None and c.auth_headers() == {}


def test_errors_carry_their_details():
    error = StaleReadError("busy", file="f", tensor="t", field="x", expected="e", found="g")
    assert str(error) == "f: tensor 't': x: busy (expected e, found g)"
    assert isinstance(error, Error) and isinstance(error, TimeoutError) and error.kind == "stale_read"
    import pickle
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is StaleReadError and str(again) == str(error)


# The engine hooks (shardload.vllm, shardload.sglang) fill an engine's model from a server, every TP rank
# at one version: a rank whose group read another version copies again (tests/engines/ runs them inside
# the engines; here the group's answer is given).
def test_an_engine_fill_copies_again_until_the_ranks_agree(shared_server, models, monkeypatch):
    layout = {"tp": 2, "ep": 2}
    entries = engines.engine_layout(models["first"], rank=1, engine="vllm", **layout)
    module = engine_module(torch, entries)
    asked = []

    def group_versions(version):  # the first time another rank read the version before
        asked.append(version)
        return [version, version - 1] if len(asked) == 1 else [version, version]

    summary = engines.fill_rank(module, models["first"], 1, layout, "vllm",
                                          weight_server=shared_server.name, group_versions=group_versions)
    assert len(asked) == 2 and summary["version"] == asked[-1]
    expected = engine_module(torch, entries)
    engines.fill_rank(expected, models["first"], 1, layout, "vllm")  # from the checkpoint
    for name, tensor in expected.state_dict().items():
        assert torch.equal(module.state_dict()[name], tensor), name

    monkeypatch.setattr(engines, "_VERSION_ATTEMPTS", 2)
    with pytest.raises(ConflictError, match="different versions"):
        engines.fill_rank(module, models["first"], 1, layout, "vllm", weight_server=shared_server.name,
                                    group_versions=lambda v: [v, v + 1])


def test_a_server_started_for_an_engine_lists_its_tensors_under_the_engines_names(serve, models, connected, tiny):
    """`shardload serve --engine vllm`: every rank's engine table is the one shardload.engines plans
    from the checkpoint, each source a served tensor; a server without --engine lists none."""
    assert connected.engine is None and connected.engine_layout(0) is None
    for engine, model in (("vllm", models["fp8"]), ("sglang", tiny("mixtral"))):  # SGLang: no dense MoE layers
        server = serve(model, "--engine", engine)
        with shl.connect(server.name) as c:
            assert c.engine == engine
            for rank in c.rank_ids:
                listed = c.engine_layout(rank)
                planned = engines.engine_layout(model, rank=rank, engine=engine, tp=2, ep=2)
                assert listed == [dict(e, fill=float(e["fill"])) for e in planned], (engine, rank)
                sources = {e["source"] for e in listed if e["source"] is not None}
                assert sources <= set(c.names(rank))
                assert any(e["source"] is None for e in listed) == (engine == "vllm")  # vLLM's KV-scale slots
        assert server.stop() == 0, server.output()


@pytest.mark.parametrize("edit", [
    lambda m: m["engine_ranks"][0]["tensors"][0].update(source="model.no_such.weight"),
    lambda m: m["engine_ranks"][0]["tensors"][0].update(source_shape=[1 << 20, 1 << 20]),
    lambda m: m["engine_ranks"][0]["tensors"][0].update(source_dtype="F8_E4M3"),
    # more elements than a source of several: only a source of one is repeated
    lambda m: m["engine_ranks"][0]["tensors"][0].update(shape=[1 << 20]),
    lambda m: m["engine_ranks"][0]["tensors"][0].update(shape=[-1]),
    lambda m: m["engine_ranks"][0]["tensors"][0].update(fill="1"),
    lambda m: m["engine_ranks"][0].update(rank=1),
    lambda m: m["engine_ranks"].pop(),
], ids=["unknown_source", "source_shape", "source_dtype", "source_repeated", "negative_dim", "fill", "rank",
        "missing_rank"])
def test_an_engine_table_that_is_not_one_is_refused(serve, models, edit):
    server = serve(models["first"], "--engine", "vllm")
    _edit_manifest(server.name, edit)
    with shl.connect(server.name) as c:
        with pytest.raises(FormatError) as error:
            c.engine_layout(0)
    assert "engine_ranks[0]" in error.value.field
    assert "1048576" not in str(error.value)  # the manifest's values are not echoed


def test_serve_refuses_an_engine_that_cannot_take_the_layout(tiny, tmp_path):
    """SGLang's FP8 block format is taken for DeepSeek only (docs/engines.md): exit 2, one line, before
    anything is served."""
    name = unique_name("engine-refused")
    result = subprocess.run([shardload_bin(), "serve", tiny("llama", "fp8-block"), "--tp", "2", "--engine", "sglang",
                             "--name", name, "--port", "0"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert not os.path.exists(shm_path(name))


def test_the_engine_plugins_fill_from_a_server_for_their_engine_without_the_checkpoint(serve, models):
    """What the vLLM plugin does with --model-loader-extra-config '{"weight_server": ...}': from a server
    started with --engine vllm it takes the server's table (the checkpoint is not opened: its path here
    does not exist) and fills the same bytes as from a server that lists layout.md's names only, where it
    plans the engine's names from the checkpoint."""
    model, layout = models["first"], {"tp": 2, "ep": 2}
    for_engine, plain = serve(model, "--engine", "vllm"), serve(model)
    for rank in (0, 1):
        entries = engines.engine_layout(model, rank=rank, engine="vllm", **layout)
        by_table, by_plan = engine_module(torch, entries), engine_module(torch, entries)
        filled = engines.fill_rank(by_table, "/no/such/checkpoint", rank, layout, "vllm", weight_server=for_engine.name)
        assert filled["names_from"] == "weight server"
        assert engines.fill_rank(by_plan, model, rank, layout, "vllm", weight_server=plain.name)["names_from"] == \
            "checkpoint"
        planned = dict(by_plan.named_buffers())
        for name, t in by_table.named_buffers():
            assert torch.equal(t, planned[name]), name
        assert any(t.abs().sum() > 0 for t in planned.values())
        # The KV-cache scale slots vLLM holds and no checkpoint has: their constant.
        assert all(float(t) == 1.0 for n, t in by_table.named_buffers() if n.endswith("attn._k_scale"))


# -- a Hugging Face model id at a revision ---------------------------------------------------------

def put_versions_in_hub(hub, folder, versions):
    """A Hugging Face cache holding `versions` ({ref: (commit, model dir)}) of one repository, as
    huggingface_hub lays downloads out: each snapshot's files links to blobs, refs/REF the commit."""
    repo = hub / folder
    for ref, (commit, model) in versions.items():
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (repo / "blobs").mkdir(exist_ok=True)
        for file in sorted(pathlib.Path(model).iterdir()):
            blob = f"{commit[:8]}-{file.name}"
            (repo / "blobs" / blob).write_bytes(file.read_bytes())
            (snapshot / file.name).symlink_to(f"../../blobs/{blob}")
    return repo


def test_a_model_id_at_a_revision(serve, models, exports, tmp_path, monkeypatch):
    """--revision (load, serve, ...), an update's "revision" and resolve_model_path(revision=) read that
    snapshot of the local Hugging Face cache: the RL loop's checkpoints pushed as branches of one
    repository. A revision that is not a name, or not in the cache, changes nothing and says why."""
    first, second = "a" * 40, "b" * 40
    repo = put_versions_in_hub(tmp_path / "hub", "models--someorg--tiny-moe",
                               {"main": (first, models["first"]), "step-2": (second, models["second"])})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = "someorg/tiny-moe"
    assert shardload.resolve_model_path(model, revision="step-2") == str(repo / "snapshots" / second)
    assert shardload.resolve_model_path(model, revision=second) == str(repo / "snapshots" / second)

    def checksums(*args):
        done = run_shardload("load", *args, "--tp", "2", "--ep", "2", "--checksum")
        return [line for line in done.stdout.splitlines() if "\t" in line]

    assert checksums(model, "--revision", "step-2") == checksums(models["second"])
    assert checksums(model, "--revision", "step-2") != checksums(model)
    done = run_shardload("plan", models["first"], "--revision", "main", check=False)
    assert done.returncode == 2 and "revision" in done.stderr, done.stderr
    done = run_shardload("plan", model, "--revision", "v9", check=False)
    assert done.returncode == 1 and f"hf download {model} --revision v9" in done.stderr, done.stderr

    server = serve(model, "--revision", "step-2")
    with shl.connect(server.name) as c:
        assert {name: raw(c.tensor(0, name)) for name in c.names(0)} == exports(models["second"])[0]
    for body, words in (({"revision": "../escaped"}, "not a revision name"), ({"revision": "v9"}, "hf download")):
        status, reply = server.post("/update_weights_from_disk", {"model_path": model, **body})
        assert status != 200 and words in reply["message"] and "escaped" not in reply["message"], reply
    status, reply = server.post("/update_weights_from_disk", {"model_path": model, "revision": "main"})
    assert status == 200 and reply["version"] == 1, reply
    with shl.connect(server.name) as c:
        assert c.manifest["model_path"] == str(repo / "snapshots" / first)
        assert {name: raw(c.tensor(1, name)) for name in c.names(1)} == exports(models["first"])[1]
    assert server.stop() == 0, server.output()

