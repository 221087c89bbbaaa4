#!/usr/bin/python3
"""The weight server on 2 nodes (mpirun -np 2 on this machine) against the single-node server, in
the same run, on the 2 GB checkpoint: a full update and an experts-only update end to end (HTTP
request to answer), the commit pause readers see, and the bytes each node read and sent.

    /usr/bin/python3 bench/serve_cluster_bench.py [--bin BUILD_DIR] [--runs 3] [--out REPORT.md]

Two checkpoints of the same layout with other values (seeds 1 and 2) take turns as the update
source, so every update rewrites its bytes; both stay in the page cache (the update path, not the
disk, is measured: bench/distributed_report.md has the cold reads). Medians of --runs updates.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

TP, EP = 4, 4


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def make_models(shardload, base):
    paths = []
    for seed in (1, 2):
        path = f"{base}-seed{seed}" if seed != 1 else base
        if not os.path.exists(os.path.join(path, "config.json")):
            sh(shardload, "make-tiny", "--arch", "qwen3_moe", "--size", "2000000000", "--seed",
               str(seed), "--out", path, "--overwrite")
        paths.append(path)
    # Both in the page cache: read once.
    for path in paths:
        for name in os.listdir(path):
            with open(os.path.join(path, name), "rb") as f:
                while f.read(1 << 24):
                    pass
    return paths


def start(argv, env):
    out = open("/tmp/serve-cluster-bench.out", "w+")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        out.seek(0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)\n", out.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            out.seek(0)
            sys.exit("server failed:\n" + out.read())
        time.sleep(0.2)
    sys.exit("server did not start")


def post(port, path, body):
    start_time = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as reply:
        answer = json.loads(reply.read())
    seconds = time.perf_counter() - start_time
    if not answer.get("success"):
        sys.exit(f"update failed: {answer}")
    return seconds, answer


def node_pids(name):
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "shardload-serve " in cmd and f" --name {name} " in cmd:
            pids.append(int(pid))
    return pids


def stop(proc, name):
    for pid in node_pids(name):
        os.kill(pid, signal.SIGTERM)
    proc.wait(timeout=120)


def pause_of(answer):
    """The longest commit pause (seconds) any node's readers saw."""
    if "nodes" in answer:
        return max(n["seconds_commit"] for n in answer["nodes"])
    m = re.search(r"longest pause ([0-9.]+) ms", answer["message"])
    return float(m.group(1)) / 1e3


def measure(port, models, runs, filt):
    rows = []
    for i in range(runs + 1):  # the first update faults the staging area in: not counted
        body = {"model_path": models[(i + 1) % 2]}
        if filt:
            body["weight_name_filter"] = filt
        seconds, answer = post(port, "/update_weights_from_disk", body)
        if i > 0:
            rows.append((seconds, pause_of(answer), answer))
    # Back to the first checkpoint's values for the next case.
    if runs % 2 == 1:
        post(port, "/update_weights_from_disk", {"model_path": models[0]})
    best = sorted(rows, key=lambda r: r[0])[len(rows) // 2]
    return {"seconds": statistics.median(r[0] for r in rows),
            "pause": statistics.median(r[1] for r in rows), "answer": best[2]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build-rel")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="/tmp/bench-big")
    ap.add_argument("--out", default="bench/serve_cluster_report.md")
    args = ap.parse_args()
    shardload = os.path.join(args.bin, "shardload")
    models = make_models(shardload, args.model)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    # A benchmark on a machine of its own: the API without a key (the key's check costs nothing to measure).
    serve = [shardload, "serve", models[0], "--tp", str(TP), "--ep", str(EP), "--port", "0", "--insecure-no-api-key"]
    results = {}
    mpirun = ["mpirun", "--oversubscribe", "-np", "2"]
    cases = (("1 node", [], []), ("2 nodes, striped", mpirun, ["--read", "striped"]),
             ("2 nodes, local", mpirun, ["--read", "local"]))
    for label, launcher, read in cases:
        name = f"bench-{os.getpid()}-{len(results)}"
        proc, port = start(launcher + serve + read + ["--name", name], env)
        try:
            results[label] = {"full": measure(port, models, args.runs, None),
                              "experts": measure(port, models, args.runs, ["experts"])}
        finally:
            stop(proc, name)
    lines = [
        "# Weight server on 2 nodes against 1 node (bench/serve_cluster_bench.py)",
        "",
        f"Command: `/usr/bin/python3 bench/serve_cluster_bench.py --bin {args.bin} --runs {args.runs}`"
        f" on this machine (2 cores; both nodes are processes of it, talking through OpenMPI's shared"
        f" memory), qwen3_moe 2 GB checkpoint, tp={TP} ep={EP}, checkpoints in the page cache;"
        f" medians of {args.runs} updates alternating between two checkpoints.",
        "",
        "| update | server | end to end (s) | ratio to 1 node | commit pause (ms) | per node: read / sent (MB), stage (s) |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("full", "experts"):
        base = results["1 node"][kind]["seconds"]
        for label, _, _ in cases:
            r = results[label][kind]
            nodes = r["answer"].get("nodes")
            traffic = ("; ".join(f"node {n['node']}: {n['bytes_read'] / 1e6:.0f} / {n['bytes_sent'] / 1e6:.0f}, "
                                 f"{n['seconds_stage']:.3f}" for n in nodes) if nodes else "all read here")
            lines.append(f"| {kind} | {label} | {r['seconds']:.3f} | {r['seconds'] / base:.2f}x | "
                         f"{r['pause'] * 1e3:.1f} | {traffic} |")
    lines.append("")
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
