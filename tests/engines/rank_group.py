"""What vllm_ranks.py and sglang_ranks.py share: a group of TP processes, one per rank, each running the
script's rank_main(rank, args, port, errors) with a free loopback port for the gloo rendezvous, a request
to the weight server, and the engines' static FP8 quantization on CPU. Runs in the engines' interpreter
(the scripts' folder is first on sys.path)."""
import json
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


def post(spec, path, body):
    """POSTs JSON `body` to the weight server on the loopback port spec["port"], with its API key
    spec["api_key"]; its answer, which must say success."""
    import urllib.request

    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {spec['api_key']}"}
    request = urllib.request.Request(f"http://127.0.0.1:{spec['port']}{path}", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.loads(reply.read())
    if not answer.get("success"):
        raise RuntimeError(f"{path}: {answer}")
    return answer


def static_fp8_quant(input, scale=None, **unused):
    """The engines' static FP8 quantization (vLLM's and SGLang's scaled_fp8_quant with a scale), as their
    CUDA kernels compute it, for their FP8 post-processing on CPU: float32 x * (1 / scale), clamped to
    +-448, rounded to nearest even. Returns (codes, scale)."""
    import torch

    assert scale is not None, "only the static quantization runs while loading"
    inverse = 1.0 / scale.to(torch.float32)
    return (input.to(torch.float32) * inverse).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale
