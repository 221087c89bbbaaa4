"""Client of a running weight server (`shardload serve`): its rank files mapped read-only, per-rank
zero-copy tensors, and consistent copies into caller-provided tensors.

The shared memory is docs/serve.md's: /dev/shm/shardload-NAME/manifest.json and one
rank-{r}.bin per rank, a 4096-byte header (magic, sequence word, version word, update flag) and the
rank's tensors at the manifest's offsets. /dev/shm is writable by every user, so nothing there is
trusted: the directory and every file are opened relative to each other without following links
and refused unless they belong to the server's user (this user by default) and nobody else may
write them; the manifest is bounded, validated and never quoted in errors.

Views (`tensor`, `numpy`, `tensors`) read the live bytes: an update rewrites them in place, at the
same addresses. They are read-only mappings (PROT_READ): numpy arrays say so (not writeable), but
torch has no read-only tensors, and writing into a view kills the process (SIGSEGV). Copy first.
A view keeps its mapping alive after `close()` or the client's collection.

A double-buffered server (`serve --double-buffer`, manifest format shardload-shm/2) keeps two slots
per rank file and writes each update into the one readers do not read, then switches the header's
active slot word (bytes 32-39: the offset added to the manifest's offsets). `copy_into` follows the
switch. A view shows the slot live when it was taken: after the next update it shows an older
version, and the update after that rewrites it; take views again after each update, or copy.

Consistent copies (`copy_into`) follow docs/serve.md's whole-update protocol on x86-64 (loads are not
reordered with loads, so no fence is needed from Python): on every rank file copied from, the update
flag is 0 and the sequence word even before the copy, and the sequence and version words are the
same after it; otherwise the copy is tried again, with a growing sleep, within bounds.

    with shardload.connect("qwen") as server:               # shardload serve ... --name qwen
        w = server.tensor(0, "model.layers.1.mlp.experts.w13_weight")   # zero-copy, live
        params = {name: p for name, p in model.named_parameters() if name in server.names(0)}
        version = server.copy_into(params, rank=0)          # one consistent snapshot, in place

A server on several nodes (`mpirun -np N shardload serve ...`) keeps node n's ranks in
/dev/shm/shardload-NAME.node-n: `connect(NAME, rank=R)` opens the directory of this host that holds
rank R, and ranks are then named by their global numbers (`client.rank_ids`).

A Client is meant for one thread at a time (views may be shared freely).
"""

import bisect
import errno
import fcntl
import json
import math
import mmap
import os
import pwd
import re
import stat
import struct
import time
import warnings

import numpy as np
import torch

from .errors import ConflictError, FormatError, InvalidArgumentError, IoError, StaleReadError
from .tensors import _FLOAT8, as_float8  # noqa: F401 (as_float8 is part of the client API)

DEFAULT_TIMEOUT = 60.0  # seconds a copy may wait for an update to finish
DEFAULT_RETRIES = 100_000  # tries of one copy, busy or torn
_MAX_SLEEP = 0.01  # the backoff's ceiling: an update ends at most this long before a retry sees it

SHM_ROOT = "/dev/shm"
MANIFEST_FORMAT = "shardload-shm/1"
DOUBLE_BUFFER_FORMAT = "shardload-shm/2"  # two slots per rank file (serve --double-buffer)
MAGIC = b"SHLDSHM1"
HEADER_BYTES = 4096
MAX_MANIFEST_BYTES = 64 << 20  # as the server's own reader (kMaxManifestBytes)
MAX_RANKS = 1 << 16
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
MAX_NODES = 64  # as the server's kMaxNodes: node directories looked at for a rank
# Header words (uint64 little-endian) by index: 1 sequence, 2 version, 3 update in progress, 4 the
# active slot's offset (double buffering; 0 otherwise).
_SEQUENCE, _VERSION, _UPDATING, _ACTIVE = 1, 2, 3, 4

# Safetensors dtype name -> (numpy dtype the bytes are read as, torch dtype of views). BF16 is read
# as int16 and viewed as bfloat16; FP8 stays uint8 (see as_float8).
_DTYPES = {
    "BOOL": (np.bool_, torch.bool),
    "U8": (np.uint8, torch.uint8),
    "I8": (np.int8, torch.int8),
    "I16": (np.int16, torch.int16),
    "I32": (np.int32, torch.int32),
    "I64": (np.int64, torch.int64),
    "F16": (np.float16, torch.float16),
    "BF16": (np.int16, torch.bfloat16),
    "F32": (np.float32, torch.float32),
    "F64": (np.float64, torch.float64),
    "F8_E4M3": (np.uint8, torch.uint8),
    "F8_E5M2": (np.uint8, torch.uint8),
    "F8_E8M0": (np.uint8, torch.uint8),  # DeepSeek-V4's ue8m0 scales: bytes, viewed, never cast
}
SERVER_ALIVE = "server.alive"  # kShmServerAliveName: a running server holds a read lock on it
API_KEY_FILE = "api-key"  # kShmApiKeyName: the HTTP API's key, readable by the directory's readers
_MAX_KEY_BYTES = 4096
_F_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", 36)  # Linux's number, for Pythons that do not name it


def _held_by_a_server(dir_fd):
    """Whether a running server holds the directory: every server holds a shared open-file-description
    lock on DIR/server.alive for its whole life, and the kernel drops it when the server exits or
    dies. The probe asks (F_OFD_GETLK) whether a write lock would conflict: it takes no lock, so no
    reader can delay or deny a server's start, and it sees a server in another PID namespace."""
    try:
        fd = os.open(SERVER_ALIVE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        # struct flock {short l_type, l_whence; off_t l_start, l_len; pid_t l_pid;}, native layout.
        query = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, _F_OFD_GETLK, query)
        return struct.unpack("@hhqqi4x", answer)[0] != fcntl.F_UNLCK
    except OSError:
        return False
    finally:
        os.close(fd)


def connect(name, *, rank=None, root=SHM_ROOT, owner=None, retries=DEFAULT_RETRIES, timeout=DEFAULT_TIMEOUT):
    """Maps the rank files of the weight server `shardload serve ... --name NAME`, read-only.

    `root` is where the server's directory shardload-NAME is (/dev/shm). `owner` is the user the
    files must belong to: this process's effective user by default; a reader of a `--shm-group`
    server run by another user names that user (a name or uid). `retries` and `timeout` bound each
    `copy_into` (which can override them). Raises IoError (missing or refused files), FormatError (a
    manifest that is not a valid shardload-shm/1 manifest) or InvalidArgumentError (a bad name).
    `rank`: for a server on several nodes, the directory shardload-NAME.node-n of this host whose
    manifest lists that rank (without it, or when shardload-NAME exists, that directory)."""
    return Client(name, rank=rank, root=root, owner=owner, retries=retries, timeout=timeout)


class _RankMap:
    """One mapped rank file: the mapping, its descriptor (kept to notice the file being unlinked:
    the server replaces a file only by unlinking it) and its header words."""

    def __init__(self, fd, mm, path, slot_bytes=0):
        self.fd = fd
        self.mm = mm
        self.path = path
        self.identity = _identity(os.fstat(fd))
        self.header = np.frombuffer(mm, dtype="<u8", count=5)
        self.slot_bytes = slot_bytes  # 0: one slot
        self.bytes = np.frombuffer(mm, dtype=np.uint8)

    def stamp(self):
        # One aligned 8-byte load per word (numpy scalar access), so a word is never torn.
        h = self.header
        return int(h[_SEQUENCE]), int(h[_VERSION]), int(h[_UPDATING])

    def active(self):
        """The live slot's offset (0 in a single-buffered file). A word that is neither slot, which
        no server writes, is refused rather than followed out of the slots."""
        offset = int(self.header[_ACTIVE]) if self.slot_bytes else 0
        if offset not in (0, self.slot_bytes):
            raise FormatError("the active slot word names no slot", file=self.path, field="active slot",
                              expected=f"0 or {self.slot_bytes}", found="another value")
        return offset

    def replaced(self):
        return os.fstat(self.fd).st_nlink == 0

    def close(self):
        if self.fd is None:
            return
        self.header = self.bytes = None
        os.close(self.fd)
        self.fd = None
        try:
            self.mm.close()  # unmaps now unless a view still uses it; then the last view does
        except BufferError:
            pass
        self.mm = None

    def __del__(self):
        # A client dropped without close(): its descriptors go with it (views keep the mapping).
        if getattr(self, "fd", None) is not None:
            self.close()


class Client:
    """A weight server's shared memory, mapped read-only (see `connect`).

    Attributes: `name`, `path` (the directory), `manifest` (dict, as last read), `tp_size`,
    `ep_size`, `ranks` (the number of rank files). Properties `version` and `update_in_progress`
    read the headers now."""

    def __init__(self, name, *, rank=None, root=SHM_ROOT, owner=None, retries=DEFAULT_RETRIES,
                 timeout=DEFAULT_TIMEOUT):
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
            raise InvalidArgumentError("bad shared-memory name", field="name",
                                       expected="1-100 characters of [A-Za-z0-9._-]", found=repr(name))
        self.name = name
        self.path = os.path.join(root, f"shardload-{name}")
        self._root = root
        self._owner = _resolve_owner(owner)
        self.retries = _positive_int(retries, "retries")
        self.timeout = _positive_float(timeout, "timeout")
        self._maps = []
        self._tables = []
        self._first = 0  # the global number of the directory's first rank (0 on one node)
        self._views = {}
        self.manifest = None
        # A server on several nodes keeps shardload-NAME as its lock and nothing in it: the ranks
        # are in the node directories.
        if rank is not None and not os.path.lexists(os.path.join(self.path, "manifest.json")):
            self.path = self._node_dir(rank)
        self.refresh()

    # -- life cycle ------------------------------------------------------------------------------

    def refresh(self):
        """Reads the manifest again and maps whatever rank file the server replaced (a restart that
        reloaded, or another server on the same name). A file still linked at its name, of the same
        size, stays mapped: views of it stay live. Returns True when a rank file was remapped or a
        tensor table changed: views taken before are then no longer the served tensors (they keep
        the bytes of their old mapping); False when only the version or the expert map moved."""
        dir_fd = self._open_dir()
        try:
            self._require_live_server(dir_fd)
            manifest = _validate_manifest(self._read_manifest(dir_fd), self.name, self._manifest_path())
            old_maps, new_maps = self._maps, []
            changed = len(old_maps) != len(manifest["ranks"]) or self._first != manifest["ranks"][0]["rank"]
            try:
                for r, rank in enumerate(manifest["ranks"]):
                    fd = self._open_own(dir_fd, rank["file"], os.O_RDONLY)
                    st = os.fstat(fd)
                    if r < len(old_maps) and old_maps[r].identity == _identity(st):
                        os.close(fd)
                        new_maps.append(old_maps[r])
                    else:
                        new_maps.append(self._map(fd, st, rank))
                        changed = True
            except BaseException:
                for m in new_maps:
                    if m not in old_maps:
                        m.close()
                raise
        finally:
            os.close(dir_fd)
        tables = [rank["tensors"] for rank in manifest["ranks"]]
        changed = changed or tables != self._tables
        for m in old_maps:
            if m not in new_maps:
                m.close()
        self._maps, self._tables, self.manifest = new_maps, tables, manifest
        self._first = manifest["ranks"][0]["rank"]
        self.rank_ids = list(range(self._first, self._first + len(new_maps)))
        self._views = {}
        self.tp_size = manifest["tp_size"]
        self.ep_size = manifest["ep_size"]
        self.ranks = len(new_maps)
        return changed

    def close(self):
        """Drops this client's mappings: each is unmapped now, or when the last view of it goes."""
        self._views = {}
        for m in self._maps:
            m.close()
        self._maps = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<shardload.Client {self.path} ranks={len(self._maps)} version={self.manifest.get('version')}>"

    # -- state -----------------------------------------------------------------------------------

    @property
    def version(self):
        """The version the bytes belong to (rank 0's header), the last published one while an
        update is in progress."""
        return self._rank(self._first).stamp()[1]

    @property
    def update_in_progress(self):
        """True while an update (or a load) may be rewriting bytes of any rank."""
        return any(m.stamp()[2] for m in self._maps)

    def api_key(self):
        """The key of the server's HTTP API (DIR/api-key: made at start unless `--api-key` gave one,
        readable by this user and the --shm-group only), or None when the server runs with
        `--insecure-no-api-key`. On several nodes only node 0's directory holds it. Send it as
        `auth_headers()` does."""
        dir_fd = self._open_dir()
        try:
            try:
                os.stat(API_KEY_FILE, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise IoError(f"cannot stat: {e.strerror}", file=os.path.join(self.path, API_KEY_FILE)) from None
            fd = self._open_own(dir_fd, API_KEY_FILE, os.O_RDONLY)
        finally:
            os.close(dir_fd)
        try:
            data = os.read(fd, _MAX_KEY_BYTES + 1)
        except OSError as e:
            raise IoError(f"cannot read: {e.strerror}", file=os.path.join(self.path, API_KEY_FILE)) from None
        finally:
            os.close(fd)
        key = data[:-1] if data.endswith(b"\n") else data
        # Never echoed: a wrong file's bytes are not for an error message.
        if not key or len(key) > _MAX_KEY_BYTES or any(c < 0x21 or c > 0x7E for c in key):
            raise FormatError("the API key file does not hold a key", file=os.path.join(self.path, API_KEY_FILE),
                              expected=f"1 to {_MAX_KEY_BYTES} visible ASCII characters")
        return key.decode("ascii")

    def auth_headers(self):
        """{"Authorization": "Bearer KEY"} for the server's HTTP API ({} when it has no key)."""
        key = self.api_key()
        return {} if key is None else {"Authorization": f"Bearer {key}"}

    def names(self, rank):
        """The tensor names of `rank`, in manifest order."""
        return list(self._tables[self._index(rank)])

    def dtype(self, rank, name):
        """The safetensors dtype name of a tensor ("BF16", "F8_E4M3", ...)."""
        return self._entry(rank, name)["dtype"]

    @property
    def engine(self):
        """The engine whose names the server also lists (`shardload serve --engine`), or None."""
        engine = self.manifest.get("engine")
        return engine if engine in ENGINES else None

    def engine_layout(self, rank):
        """The tensors of `rank` under the server's engine's names (`engine`), as
        shardload.engines.engine_layout lists them: [{name, dtype, shape, source, source_shape,
        source_dtype, fill}],
        `source` the served tensor each is made of (None: every element `fill`). None when the server
        lists no engine. FormatError when the manifest's list is not one (checked against the rank's
        tensors)."""
        if self.engine is None:
            return None
        index = self._index(rank)
        ranks = self.manifest.get("engine_ranks")
        where = f"engine_ranks[{index}]"
        entry = ranks[index] if isinstance(ranks, list) and len(ranks) == len(self._maps) else None
        if not isinstance(entry, dict) or entry.get("rank") != rank or not isinstance(entry.get("tensors"), list):
            raise _manifest_error(self._manifest_path(), where, f"rank {rank}'s engine tensors")
        return [_engine_entry(t, self._tables[index], f"{where}.tensors[{i}]", self._manifest_path())
                for i, t in enumerate(entry["tensors"])]

    # -- views -----------------------------------------------------------------------------------

    def numpy(self, rank, name, *, bits=False):
        """A read-only numpy view of a tensor, sharing the mapping. NumPy has no bfloat16: a BF16
        tensor raises InvalidArgumentError unless `bits=True`, which gives its uint16 bits. FP8
        tensors are uint8 (their dtype name: `dtype(rank, name)`)."""
        entry = self._entry(rank, name)
        array = self._array(rank, name, entry)
        if entry["dtype"] == "BF16":
            if not bits:
                raise InvalidArgumentError("numpy has no bfloat16: pass bits=True for the uint16 bits, or use tensor()",
                                           tensor=name, field="dtype", expected="not BF16", found="BF16")
            return array.view(np.uint16)
        return array

    def tensor(self, rank, name):
        """A torch tensor sharing the mapping (BF16 as torch.bfloat16, FP8 as uint8 bytes: see
        as_float8); `.shardload_dtype` is its dtype name. Never write into it (see the module)."""
        with warnings.catch_warnings():
            # torch warns that the array is not writeable: that is the point of the mapping.
            warnings.simplefilter("ignore", UserWarning)
            return self._tensor(rank, name)

    def tensors(self, rank):
        """{name: tensor(rank, name)} for every tensor of `rank`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return {name: self._tensor(rank, name) for name in self.names(rank)}

    def cuda_tensors(self, rank):
        """With `serve --device cuda`: {name: torch CUDA tensor} of `rank`, in the server's GPU
        allocation opened through its CUDA IPC handle (no copy; docs/gpu.md). The allocation, and so
        these tensors, stay valid across updates (they change in place, under the rank's sequence
        word, as the shared memory does) until the server stops. InvalidArgumentError when the
        server has no GPU ranks, DeviceError without a usable GPU."""
        from . import _shardload
        cuda = self.manifest.get("cuda")
        if not isinstance(cuda, dict) or not isinstance(cuda.get("ranks"), list):
            raise InvalidArgumentError("the server has no GPU ranks (serve without --device cuda)",
                                       field="cuda", expected="serve --device cuda", found="none")
        self._rank(rank)
        entries = [e for e in cuda["ranks"] if isinstance(e, dict) and e.get("rank") == rank]
        if len(entries) != 1:
            raise FormatError("not a valid weight server manifest", file=self._manifest_path(),
                              field="cuda.ranks", expected=f"one entry for rank {rank}")
        entry = entries[0]
        if not hasattr(self, "_cuda_maps"):
            self._cuda_maps = {}
        key = (rank, entry.get("ipc_handle"))
        if key not in self._cuda_maps:
            self._cuda_maps[key] = _shardload.CudaIpcMapping(entry["ipc_handle"], entry["device"], entry["bytes"])
        mapping = self._cuda_maps[key]
        base = cuda.get("tensor_offset", 4096)
        out = {}
        for name, t in self._tables[self._index(rank)].items():
            out[name] = torch.from_dlpack(mapping.tensor(name, t["dtype"], t["shape"], t["offset"] - base))
        return out

    # -- consistent copies -----------------------------------------------------------------------

    def copy_into(self, targets, rank=None, *, retries=None, timeout=None):
        """Copies tensors of one snapshot into caller-provided torch tensors (CPU or device) and
        returns the version copied.

        With `rank`, `targets` is {name: tensor} of that rank; without, it is {rank: {name: tensor}},
        copied as one snapshot over all those ranks. Every target is checked against the manifest
        first (a tensor of the rank, the same shape, the matching dtype: BF16 -> bfloat16, FP8 ->
        uint8 or torch's float8, not inside the mapping, in writable memory, not a meta tensor, no
        two elements at one address as expand() makes, no two targets sharing memory) and every
        mismatch is named in one InvalidArgumentError before anything is copied. (A tensor made by
        torch.from_numpy of a read-only array cannot be told from a writable one: torch keeps no such
        flag and warns when it is made.) The copy is retried while an update is in
        progress or the words moved; after `retries` tries or `timeout` seconds (the client's by
        default) StaleReadError names the rank that stayed busy. ConflictError when the server
        replaced or removed a rank file (restart or stop: `refresh()`)."""
        plan = self._copy_plan(targets, rank)
        retries = self.retries if retries is None else _positive_int(retries, "retries")
        timeout = self.timeout if timeout is None else _positive_float(timeout, "timeout")
        ranks = sorted(plan)
        deadline = time.monotonic() + timeout
        sleep = 0.0001
        for attempt in range(retries):
            for r in ranks:
                if self._rank(r).replaced():
                    raise ConflictError("the server replaced or removed this rank file (restarted or stopped): "
                                        "call refresh()", file=self._rank(r).path)
            before = [self._rank(r).stamp() for r in ranks]
            busy = next((r for r, (seq, _, updating) in zip(ranks, before) if seq % 2 or updating), None)
            if busy is None:
                with torch.no_grad():
                    for r in ranks:
                        slot = self._rank(r).active()  # read after the words: the copy follows it
                        for target, name in plan[r]:
                            target.copy_(self._source(r, name, slot))
                after = [self._rank(r).stamp() for r in ranks]
                if after == before:
                    version = before[0][1]
                    if any(v != version for _, v, _ in before):
                        # Ranks published at different versions with no update running: only a
                        # server that died between two publishes leaves that.
                        raise ConflictError("rank files carry different versions with no update in progress",
                                            file=self.path, field="version",
                                            found=", ".join(f"rank {r}: {s[1]}" for r, s in zip(ranks, before)))
                    self._check_layout(version)
                    return version
                busy = next(r for r, b, a in zip(ranks, before, after) if a != b)
            last = (busy, self._rank(busy).stamp())
            if attempt + 1 == retries or time.monotonic() >= deadline:
                break
            time.sleep(sleep)
            sleep = min(sleep * 2, _MAX_SLEEP)
        busy, (seq, version, updating) = last
        raise StaleReadError(f"no consistent copy of rank {busy} within {timeout:g} s and {retries} tries: "
                             "the server kept updating it", file=self._rank(busy).path,
                             field="sequence, version, update_in_progress", expected="even, unchanged, 0",
                             found=f"{seq}, {version}, {updating}")

    # -- internals -------------------------------------------------------------------------------

    def _source(self, rank, name, slot):
        """The view the copy reads: `name` of `rank` in the slot at offset `slot`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return self._tensor(rank, name, slot)

    def _tensor(self, rank, name, slot=None):
        entry = self._entry(rank, name)
        t = torch.from_numpy(self._array(rank, name, entry, slot))
        if entry["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        t.shardload_dtype = entry["dtype"]
        return t

    def _index(self, rank):
        """The position of global rank `rank` in this directory; InvalidArgumentError when it holds
        no such rank."""
        if not self._maps:
            raise InvalidArgumentError("the client is closed", file=self.path)
        last = self._first + len(self._maps) - 1
        if isinstance(rank, bool) or not isinstance(rank, int) or not self._first <= rank <= last:
            raise InvalidArgumentError("no such rank", file=self.path, field="rank",
                                       expected=f"{self._first} to {last}", found=repr(rank))
        return rank - self._first

    def _rank(self, rank):
        return self._maps[self._index(rank)]

    def _entry(self, rank, name):
        table = self._tables[self._index(rank)]
        entry = table.get(name) if isinstance(name, str) else None
        if entry is None:
            raise InvalidArgumentError(f"no such tensor in rank {rank}", file=self.path, tensor=str(name),
                                       field="name", expected=f"one of the {len(table)} tensors "
                                       "of the manifest")
        return entry

    def _array(self, rank, name, entry, slot=None):
        if slot is None:
            slot = self._rank(rank).active()
        key = (rank, name, slot)
        array = self._views.get(key)
        if array is None:
            np_dtype = _DTYPES[entry["dtype"]][0]
            count = entry["nbytes"] // np.dtype(np_dtype).itemsize
            array = np.frombuffer(self._rank(rank).mm, dtype=np_dtype, count=count,
                                  offset=entry["offset"] + slot).reshape(entry["shape"])
            self._views[key] = array
        return array

    def _copy_plan(self, targets, rank):
        writable = _WritableMemory()
        if rank is not None:
            self._rank(rank)
            targets = {rank: targets}
        if not isinstance(targets, dict) or not targets:
            raise InvalidArgumentError("targets must be a non-empty dict", field="targets",
                                       expected="{name: tensor} with rank=, or {rank: {name: tensor}}",
                                       found=type(targets).__name__)
        problems, plan = [], {}
        for r, named in targets.items():
            self._rank(r)
            if not isinstance(named, dict) or not named:
                problems.append((None, f"rank {r}: targets must be a non-empty dict of name: tensor"))
                continue
            pairs = plan.setdefault(r, [])
            for name, target in named.items():
                why = self._target_problem(r, name, target, writable)
                if why:
                    problems.append((name, f"rank {r} '{name}': {why}"))
                    continue
                view_dtype = _DTYPES[self._entry(r, name)["dtype"]][1]
                if target.dtype != view_dtype:
                    target = target.view(view_dtype)  # a float8 target takes the FP8 bytes as they are
                pairs.append((target, name))
        problems.extend(_shared_targets(plan))
        if problems:
            raise InvalidArgumentError(f"{len(problems)} target(s) do not match the manifest: "
                                       + "; ".join(p for _, p in problems),
                                       file=self._manifest_path(), tensor=problems[0][0] or "", field="targets")
        return plan

    def _target_problem(self, rank, name, target, writable):
        entry = self._tables[self._index(rank)].get(name) if isinstance(name, str) else None
        if entry is None:
            return "no such tensor in the manifest"
        if isinstance(target, np.ndarray):
            ro = "" if target.flags.writeable else "a read-only one (flags.writeable is False), and "
            return f"a NumPy array: {ro}targets are torch tensors"
        if not isinstance(target, torch.Tensor):
            return f"not a torch.Tensor but {type(target).__name__}"
        if target.device.type == "meta":
            return "a meta tensor (it has no memory to copy into)"
        problems = []
        if _overlaps_itself(target):
            problems.append("its elements share memory (an expanded or stride-0 view): it cannot hold "
                            "the tensor")
        if tuple(target.shape) != tuple(entry["shape"]):
            problems.append(f"shape {list(target.shape)}, expected {entry['shape']}")
        accepted = [_DTYPES[entry["dtype"]][1]]
        if entry["dtype"] in _FLOAT8 and hasattr(torch, _FLOAT8[entry["dtype"]]):
            accepted.append(getattr(torch, _FLOAT8[entry["dtype"]]))
        if target.dtype not in accepted:
            problems.append(f"dtype {target.dtype}, expected {' or '.join(map(str, accepted))} ({entry['dtype']})")
        if target.device.type == "cpu" and target.numel() > 0:
            base = self._rank(rank).bytes.ctypes.data
            if base <= target.data_ptr() < base + self._rank(rank).bytes.size:
                problems.append("it is a view of the read-only mapping itself")
            elif not writable.holds(target):
                problems.append("its memory is not writable (a view of a read-only mapping, such as another "
                                "client's tensor)")
        return "; ".join(problems)

    def _check_layout(self, version):
        # A version past the manifest's means an update or a restart since it was read: offsets
        # never change while a server runs, but a restart that reloaded in place could lay the
        # same files out anew. Read the manifest again and insist on the same tensor tables.
        if version == self.manifest["version"]:
            return
        try:
            dir_fd = self._open_dir()
            try:
                manifest = _validate_manifest(self._read_manifest(dir_fd), self.name, self._manifest_path())
            finally:
                os.close(dir_fd)
        except (IoError, FormatError):
            # No manifest to compare with right now (a restart removes it while it reloads): the
            # copy itself was consistent; the next copy checks again.
            return
        if [rank["tensors"] for rank in manifest["ranks"]] != self._tables:
            raise ConflictError("the server's tensor table changed (restarted with another model or layout): "
                                "call refresh()", file=self._manifest_path())
        self.manifest = manifest

    def _node_dir(self, rank):
        """The directory shardload-NAME.node-n under the root whose manifest lists `rank` (a server
        on several nodes; at most MAX_NODES looked at, each opened and read as safely as any)."""
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise InvalidArgumentError("no such rank", field="rank", expected="a rank number", found=repr(rank))
        pattern = re.compile(re.escape(f"shardload-{self.name}.node-") + r"(0|[1-9][0-9]{0,1})")
        try:
            entries = os.listdir(self._root)
        except OSError as e:
            raise IoError(f"cannot list {self._root}: {e.strerror}", file=self._root) from None
        nodes = sorted(int(m.group(1)) for m in map(pattern.fullmatch, entries) if m and int(m.group(1)) < MAX_NODES)
        for node in nodes:
            self.path = os.path.join(self._root, f"shardload-{self.name}.node-{node}")
            dir_fd = self._open_dir()
            try:
                if not _held_by_a_server(dir_fd):
                    continue  # left by a job that ran on more nodes, or kept after it stopped
                manifest = _validate_manifest(self._read_manifest(dir_fd), self.name, self._manifest_path())
            finally:
                os.close(dir_fd)
            if any(r["rank"] == rank for r in manifest["ranks"]):
                return self.path
        raise IoError(f"no weight server directory of {self.name} on this host holds rank {rank} (is "
                      f"`shardload serve --name {self.name}` running here?)",
                      file=os.path.join(self._root, f"shardload-{self.name}"))

    def _require_live_server(self, dir_fd):
        if not _held_by_a_server(dir_fd):
            raise IoError(f"no running server holds {self.path} (kept by --keep after its server stopped, "
                          f"or left by a crash): start `shardload serve --name {self.name}`", file=self.path)

    def _manifest_path(self):
        return os.path.join(self.path, "manifest.json")

    def _open_dir(self):
        try:
            root_fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise IoError(f"cannot open {self._root}: {e.strerror}", file=self._root) from None
        try:
            leaf = os.path.basename(self.path)
            try:
                fd = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
            except OSError as e:
                self._refuse_link(root_fd, leaf, self.path, "a directory", e)
                if e.errno == errno.ENOENT:
                    raise IoError("no such weight server directory (is `shardload serve --name "
                                  f"{self.name}` running?)", file=self.path) from None
                raise IoError(f"cannot open: {e.strerror}", file=self.path) from None
        finally:
            os.close(root_fd)
        try:
            self._check_owner(os.fstat(fd), self.path, stat.S_ISDIR, "directory")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_own(self, dir_fd, name, flags):
        path = os.path.join(self.path, name)
        try:
            # O_NONBLOCK: a FIFO planted in the server's place must not block the open.
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as e:
            self._refuse_link(dir_fd, name, path, "a regular file", e)
            raise IoError(f"cannot open: {e.strerror}", file=path) from None
        try:
            st = os.fstat(fd)
            self._check_owner(st, path, stat.S_ISREG, "regular file")
            if st.st_nlink != 1:
                raise IoError("refusing a file with several names (a hard link someone made)", file=path,
                              field="links", expected="1", found=str(st.st_nlink))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _refuse_link(self, dir_fd, name, path, expected, error):
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise IoError("refusing a symbolic link", file=path, field="file type", expected=expected,
                          found=f"a symbolic link owned by {_describe_user(st.st_uid)}") from None

    def _check_owner(self, st, path, is_type, what):
        if not is_type(st.st_mode):
            raise IoError(f"refusing it: not a {what}", file=path, field="file type", expected=f"a {what}",
                          found=stat.filemode(st.st_mode))
        if st.st_uid != self._owner or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise IoError(f"refusing a {what} someone else could have planted or changed", file=path,
                          field="owner and mode",
                          expected=f"owned by {_describe_user(self._owner)}, not writable by group or others",
                          found=f"owner {_describe_user(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}")

    def _read_manifest(self, dir_fd):
        path = self._manifest_path()
        fd = self._open_own(dir_fd, "manifest.json", os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_MANIFEST_BYTES:
                raise FormatError("manifest too large", file=path, field="size",
                                  expected=f"at most {MAX_MANIFEST_BYTES} bytes", found=f"{size} bytes")
            chunks, got = [], 0
            while got <= MAX_MANIFEST_BYTES:
                chunk = os.read(fd, min(1 << 20, MAX_MANIFEST_BYTES + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as e:
            raise IoError(f"cannot read: {e.strerror}", file=path) from None
        finally:
            os.close(fd)
        if got > MAX_MANIFEST_BYTES:
            raise FormatError("manifest too large", file=path, field="size",
                              expected=f"at most {MAX_MANIFEST_BYTES} bytes", found="more")
        data = b"".join(chunks)
        # The messages below give positions only: the bytes of a file that failed to parse are
        # never echoed.
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"not UTF-8 (at byte {e.start})", file=path) from None
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise FormatError(f"not JSON ({e.msg} at line {e.lineno} column {e.colno})", file=path) from None
        except (RecursionError, ValueError):
            raise FormatError("not JSON a reader accepts (nested too deeply or a number out of range)",
                              file=path) from None

    def _map(self, fd, st, rank):
        path = os.path.join(self.path, rank["file"])
        try:
            if st.st_size != rank["bytes"]:
                raise FormatError("the rank file's size is not the manifest's", file=path, field="bytes",
                                  expected=str(rank["bytes"]), found=str(st.st_size))
            try:
                mm = mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            except (OSError, ValueError) as e:
                raise IoError(f"cannot map: {e}", file=path) from None
            if mm[:len(MAGIC)] != MAGIC:
                mm.close()
                raise FormatError("not a weight server rank file (bad magic)", file=path, field="magic",
                                  expected=MAGIC.decode())
            return _RankMap(fd, mm, path, rank.get("slot_bytes", 0))
        except BaseException:
            os.close(fd)
            raise


def _overlaps_itself(tensor):
    """Whether two elements of the tensor are the same memory (expand(), a stride 0, as_strided)."""
    dims = sorted((stride, size) for size, stride in zip(tensor.shape, tensor.stride()) if size > 1)
    if any(stride == 0 for stride, _ in dims):
        return True
    # Dims in stride order, each stride past everything the smaller ones reach: no two elements meet
    # (every contiguous tensor and view of one). Otherwise compare every element's offset.
    reach = 0
    for stride, size in dims:
        if stride <= reach:
            offsets = torch.zeros((), dtype=torch.int64)
            for size_, stride_ in zip(tensor.shape, tensor.stride()):
                offsets = offsets.unsqueeze(-1) + torch.arange(size_, dtype=torch.int64) * stride_
            return offsets.unique().numel() < tensor.numel()
        reach += (size - 1) * stride
    return False


def _span(tensor):
    """(first byte, end byte) of the memory a tensor's elements lie in."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + extent * tensor.element_size()


def _mark(mask, tensor, base, unit):
    """The view of `mask` (one entry per `unit` bytes from address `base`) over the tensor's bytes."""
    per = tensor.element_size() // unit
    return mask.as_strided(tuple(tensor.shape) + (per,), tuple(st * per for st in tensor.stride()) + (1,),
                           (tensor.data_ptr() - base) // unit)


def _share_memory(a, b):
    """Whether any byte of tensor `a` is a byte of tensor `b` (both on one device, spans overlapping).
    Two dense tensors whose spans overlap do; strided ones (two column blocks of one matrix) are
    compared element by element on a mask of the bytes they span."""
    if a.is_contiguous() and b.is_contiguous():
        return True
    (a0, a1), (b0, b1) = _span(a), _span(b)
    base = min(a0, b0)
    unit = math.gcd(a.element_size(), b.element_size(), a0 - base, b0 - base)
    mask = torch.zeros((max(a1, b1) - base) // unit, dtype=torch.bool)
    _mark(mask, a, base, unit).fill_(True)
    return bool(_mark(mask, b, base, unit).any())


def _shared_targets(plan):
    """One problem line for each pair of targets that share memory (a copy into one would overwrite
    the other), found by sorting the targets' spans per device."""
    spans = []
    for r, pairs in plan.items():
        for target, name in pairs:
            if target.numel() > 0 and target.device.type != "meta":
                spans.append((str(target.device), *_span(target), r, name, target))
    spans.sort(key=lambda s: s[:2])
    problems = []
    for i, (device, begin, end, r, name, target) in enumerate(spans):
        for other in spans[i + 1:]:
            if other[0] != device or other[1] >= end:
                break
            if _share_memory(target, other[5]):
                problems.append((name, f"rank {r} '{name}' and rank {other[3]} '{other[4]}': they share memory, so "
                                 "one would not hold its tensor"))
    return problems


class _WritableMemory:
    """This process's writable memory, from /proc/self/maps as read once: a CPU target outside it
    (a view of another client's read-only mapping, of a closed client's, of any PROT_READ mapping)
    would kill the process at the first byte copied (SIGSEGV) instead of raising."""

    def __init__(self):
        self._starts = self._ends = None  # read at the first CPU target (a GPU copy needs none)

    def _read(self):
        self._starts, self._ends = [], []
        try:
            with open("/proc/self/maps", "rb") as maps:
                lines = maps.read().splitlines()
        except OSError:
            return  # no /proc: nothing to check against
        for line in lines:
            fields = line.split(maxsplit=2)
            if len(fields) < 2 or fields[1][1:2] != b"w":
                continue
            start, _, end = fields[0].partition(b"-")
            start, end = int(start, 16), int(end, 16)
            # The file is in address order; writable neighbours (a heap split by its flags) merge.
            if self._ends and self._ends[-1] == start:
                self._ends[-1] = end
            else:
                self._starts.append(start)
                self._ends.append(end)

    def holds(self, tensor):
        """Whether every byte a CPU tensor spans lies in writable memory (its strides included)."""
        if self._starts is None:
            self._read()
        if not self._starts:
            return True
        begin = tensor.data_ptr()
        span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        end = begin + span * tensor.element_size()
        i = bisect.bisect_right(self._starts, begin) - 1
        return i >= 0 and end <= self._ends[i]


def _identity(st):
    return (st.st_dev, st.st_ino, st.st_size)


def _resolve_owner(owner):
    if owner is None:
        return os.geteuid()
    if isinstance(owner, int) and not isinstance(owner, bool) and owner >= 0:
        return owner
    if isinstance(owner, str):
        try:
            return pwd.getpwnam(owner).pw_uid
        except KeyError:
            pass
    raise InvalidArgumentError("unknown user", field="owner", expected="a user name or uid", found=repr(owner))


def _describe_user(uid):
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _positive_int(value, field):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError("must be a positive integer", field=field, found=repr(value))
    return value


def _positive_float(value, field):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError("must be a positive number of seconds", field=field, found=repr(value))
    return float(value)


def _is_uint(value, limit=1 << 63):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


ENGINES = ("vllm", "sglang")


def _manifest_error(path, field, expected, found=""):
    return FormatError("not a valid weight server manifest", file=path, field=field, expected=expected, found=found)


def _engine_entry(t, table, where, path):
    """One engine tensor of the manifest, checked: names and dtypes as strings, shapes of bounded
    non-negative integers, a source that is a tensor of the rank with as many elements, or one (repeated)."""
    def shape_ok(shape):
        return isinstance(shape, list) and len(shape) <= 8 and all(_is_uint(d, 1 << 40) for d in shape)

    if not isinstance(t, dict):
        raise _manifest_error(path, where, "an object", type(t).__name__)
    name, dtype, shape, source, fill = (t.get(k) for k in ("name", "dtype", "shape", "source", "fill"))
    if not isinstance(name, str) or not 0 < len(name) <= 1024:
        raise _manifest_error(path, f"{where}.name", "a tensor name")
    if not isinstance(dtype, str) or len(dtype) > 16 or not shape_ok(shape):
        raise _manifest_error(path, where, "a dtype name and a shape", found=name)
    if isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise _manifest_error(path, f"{where}.fill", "a number", found=name)
    out = {"name": name, "dtype": dtype, "shape": list(shape), "source": None, "source_shape": None,
           "source_dtype": None, "fill": float(fill), "rows": None}
    rows = t.get("rows")
    if rows is not None:  # the rows [first, count] of the engine's tensor this part fills
        if not isinstance(rows, list) or len(rows) != 2 or not all(_is_uint(r, 1 << 40) for r in rows) \
                or not shape or rows[1] != shape[0]:
            raise _manifest_error(path, f"{where}.rows", "[first row, rows] of the part's shape", found=name)
        out["rows"] = list(rows)
    if source is None:
        return out
    served = table.get(source) if isinstance(source, str) else None
    source_shape = t.get("source_shape")
    if served is None or not shape_ok(source_shape) or list(source_shape) != list(served["shape"]) \
            or t.get("source_dtype") != served["dtype"] or math.prod(source_shape) not in (1, math.prod(shape)):
        raise _manifest_error(path, f"{where}.source", "a tensor of the rank, its shape and dtype, as many "
                              "elements as the engine's tensor or one", found=name)
    out["source"], out["source_shape"], out["source_dtype"] = source, list(source_shape), served["dtype"]
    return out


def _validate_manifest(manifest, name, path):
    """The manifest, checked so that every view and copy stays inside its rank file; FormatError
    naming the field otherwise (its values are quoted only when they are small numbers or names)."""
    def bad(field, expected, found=""):
        return FormatError("not a valid weight server manifest", file=path, field=field, expected=expected,
                           found=found)

    if not isinstance(manifest, dict):
        raise bad("(top level)", "a JSON object", type(manifest).__name__)
    if manifest.get("format") not in (MANIFEST_FORMAT, DOUBLE_BUFFER_FORMAT):
        raise bad("format", f"{MANIFEST_FORMAT} or {DOUBLE_BUFFER_FORMAT}",
                  "another format" if "format" in manifest else "none")
    double = manifest["format"] == DOUBLE_BUFFER_FORMAT
    if double and (manifest.get("slots") != 2 or isinstance(manifest.get("slots"), bool)):
        raise bad("slots", "2")
    if manifest.get("name") != name:
        raise bad("name", repr(name), "another name")
    for field in ("version", "tp_size", "ep_size"):
        value = manifest.get(field)
        if not _is_uint(value) or (field != "version" and value < 1):
            raise bad(field, "a non-negative integer" if field == "version" else "a positive integer",
                      type(value).__name__)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, list) or not 1 <= len(ranks) <= MAX_RANKS:
        raise bad("ranks", f"a list of 1 to {MAX_RANKS} ranks", type(ranks).__name__)
    # A node of a server on several nodes lists its ranks [first, last] from `node_ranks`.
    first = 0
    if "node_ranks" in manifest:
        node_ranks = manifest["node_ranks"]
        if (not isinstance(node_ranks, list) or len(node_ranks) != 2 or not all(_is_uint(v, MAX_RANKS) for v in node_ranks)
                or node_ranks[1] - node_ranks[0] + 1 != len(ranks)):
            raise bad("node_ranks", f"[first, last] of the {len(ranks)} ranks listed")
        first = node_ranks[0]
    for i, rank in enumerate(ranks):
        r = first + i
        where = f"ranks[{i}]"
        if not isinstance(rank, dict):
            raise bad(where, "an object", type(rank).__name__)
        if rank.get("rank") != r or isinstance(rank.get("rank"), bool):
            raise bad(f"{where}.rank", str(r))
        # The file name is fixed: a manifest cannot send the client to another file.
        if rank.get("file") != f"rank-{r}.bin":
            raise bad(f"{where}.file", f"rank-{r}.bin")
        size = rank.get("bytes")
        if not _is_uint(size) or size < HEADER_BYTES:
            raise bad(f"{where}.bytes", f"an integer of at least {HEADER_BYTES}")
        if double:
            # The tensors lie in slot 0; slot 1 is slot_bytes (whole pages) further.
            slot = rank.get("slot_bytes")
            if not _is_uint(slot) or slot % 4096 or size != HEADER_BYTES + 2 * slot:
                raise bad(f"{where}.slot_bytes", "a multiple of 4096, half of the bytes after the header")
            size = HEADER_BYTES + slot
        elif "slot_bytes" in rank:
            raise bad(f"{where}.slot_bytes", f"none in a {MANIFEST_FORMAT} manifest", "present")
        tensors = rank.get("tensors")
        if not isinstance(tensors, dict):
            raise bad(f"{where}.tensors", "an object", type(tensors).__name__)
        for tensor_name, entry in tensors.items():
            _validate_tensor(tensor_name, entry, size, lambda field, expected, found="":
                             FormatError("not a valid weight server manifest", file=path, tensor=tensor_name,
                                         field=f"{where}.tensors.{field}", expected=expected, found=found))
    return manifest


def _validate_tensor(tensor_name, entry, file_bytes, bad):
    if not isinstance(entry, dict):
        raise bad("(entry)", "an object", type(entry).__name__)
    dtype = entry.get("dtype")
    if dtype not in _DTYPES:
        raise bad("dtype", "one of " + ", ".join(_DTYPES), "another dtype")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > 64 or not all(_is_uint(d, 1 << 62) for d in shape):
        raise bad("shape", "a list of at most 64 non-negative integers")
    itemsize = np.dtype(_DTYPES[dtype][0]).itemsize
    count = 1
    for d in shape:
        count *= d
    nbytes, offset = entry.get("nbytes"), entry.get("offset")
    if nbytes != count * itemsize or isinstance(nbytes, bool):
        raise bad("nbytes", f"{count * itemsize} (shape x dtype size)")
    if not _is_uint(offset) or offset < HEADER_BYTES or offset % itemsize or offset + nbytes > file_bytes:
        raise bad("offset", f"a multiple of {itemsize} from {HEADER_BYTES} with the tensor inside the "
                  f"{file_bytes}-byte file")


__all__ = ["connect", "Client", "as_float8", "SHM_ROOT", "MAX_MANIFEST_BYTES", "ENGINES"]
