"""What the engines' tests share: the shardload binary, the engines' PyPI interpreter, and one check.

The tests run in Debian's python; vLLM and SGLang run in their own PyPI environment,
SHARDLOAD_ENGINES_PYTHON, made by scripts/pypi-env.sh from requirements.lock and requirements-nodeps.lock
(`make test` makes it). Without it the tests report themselves skipped.

The check: for each checkpoint, (a) the engine's own load of the Hugging Face checkpoint and (b) the
engine's load_format="sharded_state" load of `shardload export --engine ENGINE`, each run by the engine's
own model classes and loaders on CPU in a gloo group of T processes (vllm_ranks.py, sglang_ranks.py),
hold the same parameters on every rank: the same names, dtypes, shapes and bytes; and the export's rank
files hold exactly (a)'s state dict."""
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ENGINES = os.environ.get("SHARDLOAD_ENGINES_PYTHON", "")
BIN = os.environ.get("SHARDLOAD_BIN", "")

needs_engines = pytest.mark.skipif(not ENGINES or not os.access(ENGINES, os.X_OK),
                                   reason="no engines' environment (scripts/pypi-env.sh could not make it)")


def cli(*args):
    result = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def engine_python(script, *args):
    """Runs SCRIPT (a file of this folder) in the engines' interpreter, without the sanitizer runtime or the
    shardload package the suite may put in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH", "ASAN_OPTIONS")}
    result = subprocess.run([ENGINES, str(HERE / script), *map(str, args)], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stderr[-6000:]
    return result.stdout


def check_engine_loads_the_export(tmp_path, engine, tp, cases):
    """CASES: (family, ep) pairs. For each, make-tiny's checkpoint and its export for ENGINE at tp TP and that
    ep, both loaded by the engine; all of them in one group of TP processes (the engine's imports, most of
    the time, paid once). Every rank's parameters must be byte-equal; each difference is named in the
    failure."""
    jobs = []
    for arch, ep in cases:
        name = f"{arch}-ep{ep}"
        model, export = tmp_path / arch, tmp_path / f"{name}-export"
        if not model.exists():
            cli("make-tiny", "--arch", arch, "--out", model)
        cli("export", model, "--tp", tp, "--ep", ep, "--engine", engine, "--out", export)
        # load_export takes what it wrote: the engine's names checked against the export's plan.
        cli("load", export, "--checksum")
        # vLLM's expert parallelism is all or nothing (ep = tp), per job; SGLang's is the group's.
        suffix = (":ep" if ep > 1 else "") if engine == "vllm" else ""
        jobs += [f"{model}:{tmp_path / f'{name}-own'}:auto{suffix}",
                 f"{export}:{tmp_path / f'{name}-sharded'}:sharded_state{suffix}"]
    if engine == "vllm":
        assert all(ep in (1, tp) for _, ep in cases)
        parallel = ["--tp", tp]
    else:
        # SGLang's expert-parallel size is the group's: dense models (ep 1) load beside MoE ones in it.
        assert len({ep for _, ep in cases} - {1}) <= 1
        parallel = ["--tp", tp, "--ep", max(ep for _, ep in cases)]
    engine_python(f"{engine}_ranks.py", *parallel, *jobs)
    # The engine's load of the export holds what its own load holds; and the export's files hold exactly the
    # engine's state dict (names, dtypes, shapes, bytes: what its save_sharded_state writes), which the
    # first alone would not show where the loader casts a dtype on copy.
    pairs = []
    for arch, ep in cases:
        name = f"{arch}-ep{ep}"
        pairs += [tmp_path / f"{name}-own", tmp_path / f"{name}-sharded"]
        pairs += [tmp_path / f"{name}-own", tmp_path / f"{name}-export"]
    lines = engine_python("compare_ranks.py", *pairs).splitlines()
    differences = [line for line in lines if not line.endswith(": byte-equal")]
    assert len(lines) >= len(pairs) // 2 and not differences, "\n".join(differences)
