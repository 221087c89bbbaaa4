"""What vllm_ranks.py and sglang_ranks.py share: a group of TP processes, one per rank, each running the
script's rank_main(rank, args, port, errors) with a free loopback port for the gloo rendezvous. Runs in
the engines' interpreter (the scripts' folder is first on sys.path)."""
import socket
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(name, rank_main, args):
    """Starts args.tp spawned processes of rank_main and waits for them; exits naming the ranks that
    failed, with what each reported on the error queue."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, args, port, errors)) for r in range(args.tp)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        while not errors.empty():
            sys.stderr.write(errors.get() + "\n")
        sys.exit(f"{name}: ranks {failed} failed")
