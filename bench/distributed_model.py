#!/usr/bin/python3
"""Predicted multi-node load times for DeepSeek-V3 and Qwen3-235B-A22B (docs/distributed_model.md).

Writes sparse checkpoints with the real shapes (`shardload make-tiny --config ... --sparse`), asks
`shardload plan --nodes N --read P` what every node needs, reads, sends and receives, and turns
those bytes into load times with the bandwidth model of docs/distributed_model.md. Prints markdown.

Standard library only, so that it runs with /usr/bin/python3 on any node:
    /usr/bin/python3 bench/distributed_model.py --bin build/shardload > model.md
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9  # decimal, like storage and network vendors state bandwidth

# (name, config path relative to the repo root)
MODELS = [
    ("DeepSeek-V3 (FP8 block)", "tests/data/configs/deepseek-v3/config.json"),
    ("Qwen3-235B-A22B (bf16)", "bench/configs/qwen3-235b-a22b/config.json"),
]
RANKS = [16, 32, 64, 128]
NODES = [2, 4, 8, 16]
MAX_RANKS_PER_NODE = 8
POLICIES = ["striped", "local"]
# Tried in order for each layout: the plain tensor-parallel layout first, then the large-EP layout
# SGLang runs DeepSeek with at these sizes (data-parallel attention on every rank, dense MLPs whole,
# DeepEP experts), for layouts whose head counts or FP8 blocks do not split over T ranks.
FLAG_SETS = [
    ("plain", lambda t: []),
    ("dp-attn", lambda t: ["--dp", str(t), "--moe-dense-tp-size", "1", "--moe-a2a-backend", "deepep"]),
]

NODE_LINE = re.compile(
    r"^node (\d+) \(ranks (\d+)-(\d+)\): needs (\d+) bytes, reads (\d+), sends (\d+), receives (\d+)$")
TOTAL_LINE = re.compile(r"^nodes=(\d+) read=(\w+): (\d+) bytes needed,")


@dataclass
class NodeBytes:
    needed: int
    read: int
    sent: int
    received: int


@dataclass
class Plan:
    needed_total: int  # distinct checkpoint bytes any node needs
    nodes: list = field(default_factory=list)  # NodeBytes per node


@dataclass
class Inputs:
    shared: list  # total bandwidth of the shared file system, GB/s (all nodes together)
    local: list  # node-local storage bandwidth per node, GB/s
    net: float  # network bandwidth per node and direction, GB/s
    client: float  # a node's own link to shared storage, GB/s


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def make_checkpoint(binary, config, out):
    result = run([binary, "make-tiny", "--config", config, "--sparse", "--out", out])
    if result.returncode != 0:
        sys.exit(f"make-tiny {config} failed:\n{result.stdout}")
    # The engines' "read the whole checkpoint": every byte of every file (headers included).
    return sum(os.path.getsize(os.path.join(out, name)) for name in os.listdir(out)
               if name.endswith(".safetensors"))


def plan(binary, model_dir, ranks, flags, nodes, policy):
    """The per-node bytes of `plan` (its text summary lines), or the error text when the layout fails."""
    cmd = [binary, "plan", model_dir, "--tp", str(ranks), "--ep", str(ranks), *flags,
           "--nodes", str(nodes), "--read", policy]
    result = run(cmd)
    if result.returncode != 0:
        return None, result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "failed"
    parsed = None
    for line in result.stdout.splitlines():
        total = TOTAL_LINE.match(line)
        if total:
            if int(total.group(1)) != nodes or total.group(2) != policy:
                sys.exit(f"unexpected plan summary: {line}")
            parsed = Plan(int(total.group(3)))
            continue
        node = NODE_LINE.match(line)
        if node and parsed is not None:
            parsed.nodes.append(NodeBytes(*(int(node.group(i)) for i in range(4, 8))))
    if parsed is None or len(parsed.nodes) != nodes:
        sys.exit(f"could not read the node lines of: {' '.join(cmd)}")
    check(parsed, policy, " ".join(cmd))
    return parsed, None


# --- the model (docs/distributed_model.md states the same formulas) ---------------------------
# Reads, sends and receives overlap (the loader pipelines them) and the network is full duplex,
# so a load takes as long as its slowest resource: max(read seconds, network seconds).

def read_seconds(p, kind, s, inputs):
    """Seconds of storage reads. shared: the cluster's reads share the total bandwidth s, and a node
    reads no faster than its own client link. local: every node reads its own copy at s."""
    busiest = max(n.read for n in p.nodes)
    if kind == "shared":
        return max(sum(n.read for n in p.nodes) / (s * GB), busiest / (inputs.client * GB))
    return busiest / (s * GB)


def net_bytes(p):
    """The busiest node's sends or receives, whichever is larger (each direction has B)."""
    return max(max(n.sent, n.received) for n in p.nodes)


def load_seconds(p, kind, s, inputs):
    return max(read_seconds(p, kind, s, inputs), net_bytes(p) / (inputs.net * GB))


def whole_seconds(c, nodes, kind, s, inputs):
    """Every node reads the whole checkpoint C (the engines): N x C through the shared storage, or
    C from each node's own copy."""
    if kind == "shared":
        return max(nodes * c / (s * GB), c / (inputs.client * GB))
    return c / (s * GB)


def check(p, policy, where):
    """The plan's own invariants that the model relies on (issue 18): striped reads each needed
    byte once; local sends nothing and reads what its ranks need."""
    if policy == "striped" and sum(n.read for n in p.nodes) != p.needed_total:
        sys.exit(f"{where}: striped reads {sum(n.read for n in p.nodes)} bytes, needed {p.needed_total}")
    if policy == "local" and any(n.sent or n.received or n.read != n.needed for n in p.nodes):
        sys.exit(f"{where}: local moves bytes over the network or reads other than it needs")


# --- output -------------------------------------------------------------------------------

def gb(x):
    return f"{x / GB:.1f}"


def secs(x):
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def layouts(binary, scratch, models):
    """Every (model, ranks, flags, nodes) row with its plans under both policies."""
    rows = []
    for name, config in models:
        model_dir = os.path.join(scratch, re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))
        checkpoint = make_checkpoint(binary, config, model_dir)
        for ranks in RANKS:
            for nodes in NODES:
                if ranks % nodes or ranks // nodes > MAX_RANKS_PER_NODE:
                    continue
                plans, used, errors = {}, None, []
                for label, flags in FLAG_SETS:
                    first, error = plan(binary, model_dir, ranks, flags(ranks), nodes, POLICIES[0])
                    if first is None:
                        errors.append(f"{label}: {error}")
                        continue
                    plans[POLICIES[0]] = first
                    for policy in POLICIES[1:]:
                        other, error = plan(binary, model_dir, ranks, flags(ranks), nodes, policy)
                        if other is None:
                            sys.exit(f"{name} tp={ranks} {label} --read {policy}: {error}")
                        plans[policy] = other
                    used = (label, flags(ranks))
                    break
                rows.append(dict(model=name, checkpoint=checkpoint, ranks=ranks, nodes=nodes,
                                 used=used, plans=plans, errors=errors))
    return rows


def flags_text(used):
    return "`" + " ".join(used[1]) + "`" if used[1] else "plain"


def print_inputs(inputs, models_checkpoint):
    print("## Inputs\n")
    print(f"- shared storage, total bandwidth S (all nodes together): {', '.join(f'{s:g}' for s in inputs.shared)} GB/s")
    print(f"- a node's own link to shared storage L: {inputs.client:g} GB/s")
    print(f"- node-local storage, per node: {', '.join(f'{s:g}' for s in inputs.local)} GB/s")
    print(f"- network B per node, each direction: {inputs.net:g} GB/s")
    for name, c in models_checkpoint:
        print(f"- {name}: checkpoint C = {gb(c)} GB (all .safetensors files)")
    print("- GB = 10^9 bytes; times in seconds\n")


def print_traffic(rows):
    print("## What each node reads, sends and receives (from `shardload plan`)\n")
    print("Busiest node, GB. `need` = the distinct bytes its ranks take; local reads exactly that.\n")
    print("| model | T (tp = ep) | flags | nodes | ranks/node | total needed | need/node | striped read | striped send | striped recv |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["used"] is None:
            continue
        striped = row["plans"]["striped"]
        print(f"| {row['model']} | {row['ranks']} | {flags_text(row['used'])} | {row['nodes']} | "
              f"{row['ranks'] // row['nodes']} | {gb(striped.needed_total)} | "
              f"{gb(max(n.needed for n in striped.nodes))} | {gb(max(n.read for n in striped.nodes))} | "
              f"{gb(max(n.sent for n in striped.nodes))} | {gb(max(n.received for n in striped.nodes))} |")
    print()


def print_times(rows, inputs):
    print("## Predicted load times (seconds)\n")
    print("`whole` = every node reads the whole checkpoint (the engines); `local` = `--read local` "
          "(each node reads what its ranks need); `striped` = `--read striped`; "
          "`x` = whole / striped; `B*` = the network bandwidth per node (GB/s) below which striped "
          "would wait on the network rather than on storage.\n")
    storages = [("shared", s) for s in inputs.shared] + [("local", s) for s in inputs.local]
    for kind, s in storages:
        title = (f"Shared storage, S = {s:g} GB/s in total" if kind == "shared"
                 else f"Node-local storage, {s:g} GB/s per node")
        print(f"### {title} (B = {inputs.net:g} GB/s)\n")
        print("| model | T | nodes | whole | local | striped | x | B* |")
        print("|---|---|---|---|---|---|---|---|")
        for row in rows:
            if row["used"] is None:
                continue
            plans = row["plans"]
            whole = whole_seconds(row["checkpoint"], row["nodes"], kind, s, inputs)
            local = load_seconds(plans["local"], kind, s, inputs)
            striped = load_seconds(plans["striped"], kind, s, inputs)
            bound = net_bytes(plans["striped"]) / read_seconds(plans["striped"], kind, s, inputs) / GB
            marks = "*" if row["used"][0] != "plain" else ""
            print(f"| {row['model']} | {row['ranks']}{marks} | {row['nodes']} | {secs(whole)} | "
                  f"{secs(local)} | {secs(striped)} | {whole / striped:.1f} | {bound:.2g} |")
        print()
    print("`*`: the layout uses the data-parallel-attention flags of the traffic table (plain tp fails).\n")


def print_failures(rows):
    failed = [(r, e) for r in rows for e in r["errors"]]
    if not failed:
        return
    print("## Layouts that plain tensor parallelism cannot split\n")
    for row, error in failed:
        if row["used"] is None or error.startswith("plain"):
            print(f"- {row['model']} T={row['ranks']} nodes={row['nodes']}: {error}")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(REPO, "build", "shardload"), help="shardload binary")
    parser.add_argument("--scratch", default=tempfile.gettempdir(), help="directory under which the sparse checkpoints go (a new folder, removed after)")
    parser.add_argument("--shared", type=float, nargs="+", default=[10, 40, 100], help="shared storage GB/s, total")
    parser.add_argument("--local", type=float, nargs="+", default=[3, 6.5], help="node-local storage GB/s, per node")
    parser.add_argument("--net", type=float, default=25, help="network GB/s per node and direction")
    parser.add_argument("--client", type=float, default=25, help="a node's link to shared storage, GB/s")
    parser.add_argument("--keep", action="store_true", help="keep the sparse checkpoints")
    args = parser.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin}: not an executable shardload (build it, or pass --bin)")
    inputs = Inputs(args.shared, args.local, args.net, args.client)
    models = [(name, os.path.normpath(os.path.join(REPO, path))) for name, path in MODELS]
    os.makedirs(args.scratch, exist_ok=True)
    # A fresh directory of our own, so that nothing already in --scratch is replaced or removed.
    work = tempfile.mkdtemp(prefix="distributed_model.", dir=args.scratch)
    try:
        rows = layouts(args.bin, work, models)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    checkpoints = []
    for row in rows:
        if (row["model"], row["checkpoint"]) not in checkpoints:
            checkpoints.append((row["model"], row["checkpoint"]))
    print_inputs(inputs, checkpoints)
    print_traffic(rows)
    print_times(rows, inputs)
    print_failures(rows)


if __name__ == "__main__":
    main()
