"""shardload.client against a server on several nodes (`mpirun --oversubscribe -np 2 shardload
serve`): a client finds its rank's node directory from the name and the rank alone, names ranks by
their global numbers, reads every tensor as the export has it, and copies consistent snapshots while
updates commit on every node."""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import torch

from conftest import read_safetensors, run_shardload, shardload_bin
from shardload import client as shl
from shardload.errors import InvalidArgumentError, IoError

MPIRUN = shutil.which("mpirun")
TP = EP = 4
NODES = 2
START_TIMEOUT = 180

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun on this machine")


def mpi_env():
    # CI runs as root; OpenMPI refuses root without these. 2 processes on 2 cores: do not spin.
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMPI_MCA_mpi_yield_when_idle="1", OMPI_MCA_rmaps_base_oversubscribe="1")


def node_pids(name):
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "shardload-serve " in cmd and f" --name {name} " in cmd:
            pids.append(int(pid))
    return pids


def start_server(model, name, out, nodes=NODES, *more):
    """`shardload serve MODEL --tp 4 --ep 4 --name NAME` on `nodes` nodes (mpirun when more than
    one), output to OUT: (process, port)."""
    launcher = [MPIRUN, "--oversubscribe", "-np", str(nodes)] if nodes > 1 else []
    with open(out, "wb") as log:
        process = subprocess.Popen(
            [*launcher, shardload_bin(), "serve", model, "--tp", str(TP), "--ep", str(EP), "--name", name,
             "--port", "0", "--threads", "2", *more],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=mpi_env())
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)\n", out.read_text())
        if m:
            return process, int(m.group(1))
        if process.poll() is not None:
            pytest.fail(f"the server ended: {out.read_text()}")
        time.sleep(0.05)
    stop_server(process, name)
    pytest.fail(f"the server did not listen: {out.read_text()}")


def stop_server(process, name):
    """SIGTERM to the node processes: node 0 tells the others, every node removes its directory."""
    for pid in node_pids(name):
        os.kill(pid, signal.SIGTERM)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return process.returncode


def remove_dirs(name, nodes=4):
    shutil.rmtree(f"/dev/shm/shardload-{name}", ignore_errors=True)
    for n in range(nodes):
        shutil.rmtree(f"/dev/shm/shardload-{name}.node-{n}", ignore_errors=True)


@pytest.fixture
def cluster(tiny, tmp_path):
    """A 2-node server on a tiny MoE model at tp 4 x ep 4: (name, port, first model, second model)."""
    first, second = tiny("qwen3_moe", seed=51), tiny("qwen3_moe", seed=52)
    name = f"pycluster-{os.getpid()}-{time.monotonic_ns()}"
    process, port = start_server(first, name, tmp_path / "serve.out")
    try:
        yield name, port, first, second
    finally:
        stop_server(process, name)
        remove_dirs(name)


def export(model, out):
    run_shardload("export", model, "--tp", TP, "--ep", EP, "--out", out)
    manifest = json.loads((out / "shardload.json").read_text())
    ranks = {}
    for rank in manifest["ranks"]:
        for file in rank["files"]:
            ranks.setdefault(rank["rank"], {}).update(
                {name: raw for name, (_, _, raw) in read_safetensors(out / file).items()})
    return ranks


def raw(t):
    """The bytes of a tensor (bfloat16 through its int16 bits)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def post(port, path, body, name):
    """POSTs to node 0's HTTP API with the key the Python client reads from node 0's directory."""
    import urllib.request
    with shl.connect(name, rank=0) as c:
        headers = {"Content-Type": "application/json", **c.auth_headers()}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def test_a_client_finds_its_rank_on_its_node(cluster, tmp_path):
    name, port, first, second = cluster
    expected = export(first, tmp_path / "first")
    for rank in range(TP):
        node = rank // (TP // NODES)
        with shl.connect(name, rank=rank) as c:
            assert c.path == f"/dev/shm/shardload-{name}.node-{node}"
            assert c.rank_ids == [node * 2, node * 2 + 1]
            assert c.manifest["node"] == node and c.manifest["nodes"] == NODES
            views = c.tensors(rank)
            assert sorted(views) == sorted(expected[rank])
            for tensor, view in views.items():
                assert raw(view) == expected[rank][tensor], f"rank {rank} {tensor}"
            other = (rank + 2) % TP  # held by the other node
            with pytest.raises(InvalidArgumentError):
                c.tensors(other)
    with pytest.raises(IoError):
        shl.connect(name, rank=TP)  # no node holds it
    with pytest.raises(IoError):
        shl.connect(name)  # on several nodes shardload-NAME is the NAME's lock and holds no manifest

    # An update commits on every node: the client copies one consistent snapshot of the new values.
    answer = post(port, "/update_weights_from_disk", {"model_path": second}, name)
    assert answer["success"] and answer["version"] == 1, answer
    updated = export(second, tmp_path / "second")
    with shl.connect(name, rank=3) as c:
        targets = {tensor: torch.empty_like(view) for tensor, view in c.tensors(3).items()}
        assert c.copy_into(targets, rank=3) == 1
        for tensor, target in targets.items():
            assert raw(target) == updated[3][tensor], tensor


def test_one_name_is_one_server_and_leftovers_never_shadow_it(tiny, tmp_path):
    """Leftovers of the same NAME (a one-node server's directory kept by --keep, the node directories
    of a job that ran on 4 nodes) never shadow a live 2-node server: it starts, removes the node
    directories no server holds and empties the kept directory, whose lock it now holds;
    connect(NAME, rank=2) maps the live node 1; a one-node server on the NAME is refused while it
    runs, and a 2-node one while a one-node server runs; once stopped, nothing of it is mapped."""
    first = tiny("qwen3_moe", seed=51)
    name = f"pystale-{os.getpid()}-{time.monotonic_ns()}"
    base = f"/dev/shm/shardload-{name}"
    try:
        single, _ = start_server(first, name, tmp_path / "single.out", 1, "--keep")
        assert stop_server(single, name) == 0
        assert os.path.exists(f"{base}/manifest.json")
        with pytest.raises(IoError, match="no running server holds"):
            shl.connect(name)
        for node in (2, 3):  # what a 4-node job left: directories with manifests listing ranks
            os.mkdir(f"{base}.node-{node}", 0o700)
            shutil.copy(f"{base}/manifest.json", f"{base}.node-{node}/manifest.json")

        process, _ = start_server(first, name, tmp_path / "cluster.out")
        try:
            assert not os.path.exists(f"{base}.node-2") and not os.path.exists(f"{base}.node-3")
            assert not os.path.exists(f"{base}/manifest.json")
            with shl.connect(name, rank=2) as c:
                assert c.path == f"{base}.node-1"
                assert c.rank_ids == [2, 3]
            refused = subprocess.run(
                [shardload_bin(), "serve", first, "--tp", str(TP), "--ep", str(EP), "--name", name, "--port",
                 "0"], capture_output=True, text=True, timeout=120)
            assert refused.returncode != 0 and "another shardload serve" in refused.stderr, refused.stderr
        finally:
            assert stop_server(process, name) == 0
        assert not any(os.path.exists(p) for p in (base, f"{base}.node-0", f"{base}.node-1"))
        with pytest.raises(IoError):
            shl.connect(name, rank=2)

        single, _ = start_server(first, name, tmp_path / "single-again.out", 1)
        try:
            refused = subprocess.run(
                [MPIRUN, "--oversubscribe", "-np", str(NODES), shardload_bin(), "serve", first, "--tp", str(TP),
                 "--ep", str(EP), "--name", name, "--port", "0"],
                capture_output=True, text=True, timeout=120, env=mpi_env())
            assert refused.returncode != 0, refused.stdout + refused.stderr
            assert "another shardload serve" in refused.stdout + refused.stderr
            with shl.connect(name) as c:  # the one-node server still serves, untouched
                assert c.version == 0
        finally:
            assert stop_server(single, name) == 0
    finally:
        remove_dirs(name)
