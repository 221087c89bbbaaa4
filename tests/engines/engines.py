"""What the engines' tests share: the shardload binary, the engines' PyPI interpreter, and one check.

The tests run in Debian's python; vLLM and SGLang run in their own PyPI environment,
SHARDLOAD_ENGINES_PYTHON, made by scripts/pypi-env.sh from requirements.lock and requirements-nodeps.lock
(`make test` makes it). Without it the tests report themselves skipped.

The check (check_engine): for each checkpoint, (a) the engine's own load of the Hugging Face checkpoint,
(b) the engine's load_format="sharded_state" load of `shardload export --engine ENGINE`, and shardload inside
the engine (c) from the checkpoint and (d) from a running weight server, each run by the engine's own model
classes on CPU in a gloo group of T processes (vllm_ranks.py, sglang_ranks.py), hold the same parameters on
every rank: the same names, dtypes, shapes and bytes; the export's rank files hold exactly (a)'s state dict;
and a live model synced in place after the server's update (and rebalance) holds what the engine's own means
make of the same change."""
import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import time
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ENGINES = os.environ.get("SHARDLOAD_ENGINES_PYTHON", "")
BIN = os.environ.get("SHARDLOAD_BIN", "")

needs_engines = pytest.mark.skipif(not ENGINES or not os.access(ENGINES, os.X_OK),
                                   reason="no engines' environment (scripts/pypi-env.sh could not make it)")


# Importing vLLM or SGLang imports humming's kernels, which start two interpreters in the background to build their
# CUDA launcher and NVRTC compiler: on a machine without CUDA both fail, after about 7 CPU-seconds each, for
# every engine process a test starts. Nothing the loaders do uses them.
NO_KERNEL_BUILDS = {"HUMMING_DISABLE_PARALLEL_BUILD": "1"}


def cli(*args, env=None):
    result = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout


def engine_python(script, *args, shardload=False, env=None):
    """Runs SCRIPT (a file of this folder, or "-c" and a line of code) in the engines' interpreter, without
    the sanitizer runtime or the shardload package the suite may put in the environment; with
    shardload=True, with them (the plugin's jobs: vLLM finds the package, and its entry point, on
    PYTHONPATH). ENV: variables added."""
    dropped = () if shardload else ("LD_PRELOAD", "PYTHONPATH", "ASAN_OPTIONS")
    env = {**{k: v for k, v in os.environ.items() if k not in dropped}, **NO_KERNEL_BUILDS, **(env or {})}
    script = script if script == "-c" else str(HERE / script)
    result = subprocess.run([ENGINES, script, *map(str, args)], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stderr[-6000:]
    return result.stdout


class WeightServer:
    """`shardload serve MODEL --tp T --ep E --name NAME --port 0 [--engine ENGINE]`, output to files; stop()
    kills it and removes its shared memory."""

    def __init__(self, model, tp, ep, log_dir, env=None, engine=None, dtype=None):
        self.name = f"engines-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.log = log_dir / f"{self.name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [BIN, "serve", model, "--tp", str(tp), "--ep", str(ep), "--name", self.name, "--port", "0",
                 "--threads", "2", *(["--engine", engine] if engine else []), *(["--dtype", dtype] if dtype else [])],
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)\n", self.log.read_text())
            if found:
                self.port = int(found.group(1))
                # The key the server made (its user reads it, as the plugins' trainers do).
                self.api_key = pathlib.Path(f"/dev/shm/shardload-{self.name}/api-key").read_text().strip()
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"the weight server did not start:\n{self.log.read_text()}")

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)
        shutil.rmtree(f"/dev/shm/shardload-{self.name}", ignore_errors=True)


# The model id the first case goes by with hub=True (check_engine).
HUB_ID = "shardload-test/tiny"


def put_in_hub_cache(model, cache, repo_id):
    """MODEL laid out in CACHE as huggingface_hub lays out a download of REPO_ID: each file a blob named by
    its sha256, the snapshot relative symlinks to them, refs/main the snapshot's commit."""
    root = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = root / "snapshots" / commit
    for folder in (root / "refs", root / "blobs", snapshot):
        folder.mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    for file in sorted(pathlib.Path(model).iterdir()):
        blob = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, root / "blobs" / blob)
        (snapshot / file.name).symlink_to(f"../../blobs/{blob}")
    return snapshot


def check_engine(tmp_path, engine, tp, cases, sync=False, hub=False, checkpoints=None, dtype=None):
    """CASES: (family, ep) or (family, ep, quant) tuples, each a make-tiny checkpoint (--quant, none by
    default; a family may be one of VARIANTS, e.g. "gemma4-dense", make-tiny's Gemma 4 without experts) loaded by ENGINE at tp TP and that ep, all in one group of TP processes (the engine's imports,
    most of the time, paid once); CHECKPOINTS {case family: folder} gives a case a checkpoint of its own in
    place of make-tiny's (e.g. one transformers wrote: tests/producers/test_transformers_5_25.py):
    (a) the engine's own load of the checkpoint; (b) its load_format="sharded_state" load of
    `shardload export --engine ENGINE`; (c) shardload inside it from the checkpoint (vLLM: --load-format
    shardload, found by its entry point; SGLang: LoadConfig(load_format=shardload.sglang.ShardloadLoader));
    (d) the same from a running weight server. Every rank's parameters must be byte-equal to (a), and the
    export's files hold exactly (a)'s state dict (what the engine's save_sharded_state writes, which (b) alone
    would not show where the loader casts a dtype on copy). FP8 checkpoints are compared as the comment at
    their pairs says, after the engine's post-processing too.

    With SYNC the last case goes on as an RL trainer syncs a live engine: its server updates to a second
    checkpoint of that family and the live model (d) is refilled in place (vLLM: shardload.vllm.sync_worker;
    SGLang: its custom weight loader shardload.sglang.sync_weights), equal to the engine's own load of the
    second checkpoint (SGLang's DeepSeek: its MLA w_kc / w_vc too). vLLM goes on (ep = tp): its own model of
    the first checkpoint is reloaded in place by vLLM's own reload_weights and must end equal too; then the
    server rebalances (every expert to another rank), the plugin refills again, and vLLM's own EPLB applies
    the same map to its own model: equal again. A static FP8 last case (vLLM only) runs with vLLM's EPLB on
    and is synced after the update, post-processed again: byte-equal to shardload's fresh load of the second
    checkpoint, post-processed, and to vLLM's own but for the named FP8 differences; then rebalanced, equal to
    vLLM's own EPLB applied to vLLM's own load of the second checkpoint. Each difference is named in the
    failure.

    With HUB, the first case goes by a Hugging Face model id (HUB_ID) everywhere: its checkpoint laid out in
    a Hugging Face cache of its own (HF_HUB_CACHE, offline), which huggingface_hub itself must find where
    it was put; the engine's own load fetches it with the engine's own means, the plugin with the same,
    `shardload export` and the weight server find it in the cache.

    DTYPE (e.g. "float16": SGLang's AWQ takes no other) is the engine's and the weight server's model dtype.

    Then a forward pass on each family's loads, and on the synced model against the second checkpoint
    (check_forward). Returns the harness's output (the times), the allowed differences and the forward
    passes' lines."""
    jobs, pairs, servers, sync_spec, forwards = [], [], [], None, []
    vllm = engine == "vllm"
    hub_env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"} if hub else {}

    def fp8_eplb(i):
        """Whether case I is vLLM's synced static FP8 MoE model: with vLLM's EPLB on, vLLM's post-processing
        takes each MoE layer's static input scale as the maximum over the whole expert group (so that a
        rebalance keeps it), which makes the rebalance comparable."""
        arch, ep, *quant = cases[i]
        return sync and vllm and i == len(cases) - 1 and ep > 1 and (quant or ["none"])[0] in REQUANTIZED
    try:
        for i, (arch, ep, *quant) in enumerate(cases):
            quant = quant[0] if quant else "none"
            name = f"{arch}-{quant}-ep{ep}"
            model = (checkpoints or {}).get(arch) or tmp_path / (arch if quant == "none" else f"{arch}-{quant}")
            if not model.exists():
                cli("make-tiny", *make_tiny_args(engine, arch), "--quant", quant, "--out", model)
            source = model  # what the engine, the export and the server are given
            if hub and i == 0:
                snapshot = put_in_hub_cache(model, tmp_path / "hub", HUB_ID)
                found = engine_python("-c", "import huggingface_hub as h; print(h.snapshot_download("
                                      f"{HUB_ID!r}, local_files_only=True))", env=hub_env).strip()
                assert found == str(snapshot), f"huggingface_hub finds {HUB_ID} at {found}, not at {snapshot}"
                source = HUB_ID
            # SGLang's sharded_state loader post-processes before it reads (its files hold the post-processed
            # layers): `export --engine sglang` takes FP8 with --engine-post-processed, as on an NVIDIA GPU
            # with FP8 (its sharded_state job runs SGLang's post-processing in that branch: "-gpu"); without
            # the flag it refuses FP8 (test_export_engine.py). Integer and NVFP4 weights: SGLang's hooks only
            # (its post-processed layout of them is not written).
            post_processed = sglang_post_processed(engine, quant)
            exported = quant == "none" or vllm or post_processed
            export = tmp_path / f"{name}-export"
            if exported:
                cli("export", source, *export_args(engine, tp, ep, quant, dtype), "--out", export, env=hub_env)
                if not checkpoints or arch not in checkpoints:  # make-tiny's: its export digest is recorded
                    check_digest(digest_key(engine, tp, (arch, ep, quant), dtype), export)
                # load_export takes what it wrote: the engine's names checked against the export's plan.
                cli("load", export, "--checksum")
            # The first case's server lists layout.md's names only: the plugin plans the engine's names from
            # the checkpoint; the others' are started for the engine and the plugin takes their table.
            server = WeightServer(source, tp, ep, tmp_path, env=hub_env, engine=engine if i > 0 else None, dtype=dtype)
            servers.append(server)
            # vLLM's expert parallelism is all or nothing (ep = tp), per job; SGLang's is the group's. A
            # static FP8 MoE model synced and rebalanced runs with vLLM's EPLB on (fp8_eplb below).
            suffix = (":eplb" if fp8_eplb(i) else ":ep") if vllm and ep > 1 else ""
            own, sharded, plugin, served = (tmp_path / f"{name}-{kind}"
                                            for kind in ("own", "sharded", "plugin", "server"))
            jobs += [f"{source}:{own}:auto{suffix}"]
            jobs += [f"{export}:{sharded}:sharded_state{'-gpu' if post_processed else ''}{suffix}"] if exported else []
            jobs += [f"{source}:{plugin}:shardload{suffix}", f"{source}:{served}:server={server.name}{suffix}"]
            # SGLang's quant_method fp8 on an NVIDIA GPU (sglang_ranks.py: OUT-gpu) spreads each fused part's
            # scale over its rows where CPU requantizes to one; its other FP8 post-processing is the CPU's.
            gpu = [pathlib.Path(f"{p}-gpu" if quant == "fp8" else f"{p}-post") for p in (plugin, served)]
            if arch in FORWARD_FAMILIES and quant not in INT_WEIGHTS:  # (forward_ranks.py dequantizes FP8 only)
                if quant in REQUANTIZED:  # after the engine's post-processing, which requantizes (a) too
                    # Both engines' post-processing (here, without a CPU kernel's packing) holds dense FP8
                    # weights transposed.
                    loads = [own] + ([sharded] if exported else []) + [plugin, served]
                    forwards.append((True, ["--transposed", model, *(pathlib.Path(f"{p}-post") for p in loads),
                                            *(gpu if quant == "fp8" and not vllm else [])]))
                    if quant == "fp8" and not vllm and ep == 1:  # there, SGLang's own dense model holds the
                        # checkpoint's codes and scales
                        forwards.append((False, ["--transposed", model, pathlib.Path(f"{own}-gpu")]))
                else:
                    forwards.append((False, [model, own, *([sharded] if exported and not post_processed else []),
                                             plugin, served]))
                    if post_processed:  # SGLang's post-processed block and channel FP8: (c) and (b) after it
                        forwards.append((False, [*([] if quant.endswith("block") else ["--transposed"]), model,
                                                 pathlib.Path(f"{plugin}-post"), pathlib.Path(f"{sharded}-post")]))
            if post_processed:  # SGLang's sharded_state holds the files as read after its post-processing
                pairs += [f"{sharded}-post", export, f"{sharded}-post", gpu[0], f"{sharded}-post", gpu[1]]
                if arch.startswith("deepseek"):  # and the MLA tensors it derives after reading them
                    pairs += [f"{sharded}-post-derived", f"{plugin}-post-derived"]
            if quant in ("none", "mxfp4", "fp8-block", "ct-fp8-channel", "ct-fp8-block", *INT_WEIGHTS):
                # MXFP4 (gpt-oss's experts), block and channel FP8, packed integers: the checkpoint's codes
                # and scales, cut
                pairs += ([own, sharded, own, export] if exported and not post_processed else [])
                pairs += [own, plugin, own, served]
                # SGLang post-processes FP8 and compressed-tensors on load: after it too (sglang_ranks.py records
                # those methods' layers as loaded; AWQ's, untouched on CPU, are compared as they end).
                if quant not in ("none", "mxfp4", "awq") and not vllm:
                    pairs += [pathlib.Path(f"{own}-post"), pathlib.Path(f"{plugin}-post")]
            else:
                # FP8: shardload's rank is requantized once (one scale per fused layer) where the engine
                # loads the checkpoint's parts and requantizes them in its post-processing, so the
                # parameters as loaded differ from (a) by design: (b), (c) and (d) are byte-equal to each
                # other before the engine's post-processing and after it (OUT-post: the harness runs it),
                # and after it equal to (a)'s but for the differences compare_ranks.py --fp8 names.
                post = [pathlib.Path(f"{p}-post") for p in (own, sharded, plugin, served)]
                if exported and not post_processed:
                    pairs += [sharded, export, sharded, plugin, post[1], post[2]]
                pairs += [plugin, served, post[2], post[3], "--fp8", post[0], post[2]]
        if sync:
            arch, ep, *quant = cases[-1]
            quant = quant[0] if quant else "none"
            # FP8: both refills post-process again (shardload.vllm.refill_processed, shardload.sglang's).
            assert quant in ("none", *REQUANTIZED), "the sync goes on with an unquantized or per-tensor FP8 model"
            second = tmp_path / f"{arch}-second"
            cli("make-tiny", *make_tiny_args(engine, arch), "--quant", quant, "--seed", 1234, "--out", second)
            sync_spec = {"port": servers[-1].port, "api_key": servers[-1].api_key, "model": str(second),
                         "out": str(tmp_path / "synced")}
            last_own = f"{model}:{own}:auto{suffix}"  # the loop's last suffix: the last case's
            jobs.append(f"{second}:{tmp_path / 'second-own'}:auto{suffix}")
            if quant == "none":
                pairs += [tmp_path / "second-own", tmp_path / "synced"]
                if not vllm and arch.startswith("deepseek"):  # SGLang's MLA tensors derived after loading
                    pairs += [tmp_path / "second-own-derived", tmp_path / "synced-derived"]
            else:
                # The synced model, post-processed again, against shardload's and vLLM's own fresh loads of
                # the second checkpoint, post-processed.
                jobs.append(f"{second}:{tmp_path / 'second-plugin'}:shardload{suffix}")
                pairs += [tmp_path / "second-plugin-post", tmp_path / "synced",
                          "--fp8", tmp_path / "second-own-post", tmp_path / "synced"]
        if sync and arch in FORWARD_FAMILIES:  # the synced model computes the second checkpoint's model
            if quant == "none":
                forwards.append((False, [second, tmp_path / "second-own", tmp_path / "synced",
                                         *([tmp_path / "own-reloaded"] if vllm else [])]))
            else:
                forwards.append((True, ["--transposed", second, tmp_path / "second-own-post", tmp_path / "synced"]))
        if sync and vllm and quant == "none":
            # vLLM's own reload_weights of a post-processed FP8 MoE model fails on CPU (IndexError in
            # _load_per_tensor_weight_scale: the scale it restores has its post-processed shape), so FP8
            # is compared with the fresh loads above only.
            sync_spec["own"] = str(tmp_path / "own-reloaded")
            jobs.append(last_own)  # vLLM's own load of the first checkpoint, last: the one --sync reloads
            pairs += [tmp_path / "own-reloaded", tmp_path / "synced"]
        if sync and vllm and (quant == "none" or fp8_eplb(len(cases) - 1)):
            assert ep == tp, "the rebalance moves experts between the ranks of vLLM's expert group"
            current = json.loads(cli("plan", second, "--tp", tp, "--ep", ep, "--json"))["physical_to_logical_map"]
            # Every expert to another rank: each layer's row reversed, then rotated by the layer's number.
            rows = [row[::-1][layer % len(row):] + row[::-1][:layer % len(row)] for layer, row in enumerate(current)]
            sync_spec["rebalance"] = {"map": rows, "out": str(tmp_path / "rebalanced"),
                                      "own": str(tmp_path / "own-rebalanced")}
            if quant == "none":
                pairs += [tmp_path / "own-rebalanced", tmp_path / "rebalanced"]
            else:
                # vLLM's own fresh load of the second checkpoint (post-processed) is the model its EPLB moves;
                # both post-processed, so compared as FP8 (the engine's own codes through float16).
                sync_spec["own_at_new"] = True
                pairs += ["--fp8", tmp_path / "own-rebalanced", tmp_path / "rebalanced"]
        if vllm:
            assert all(case[1] in (1, tp) for case in cases)
            parallel = ["--tp", tp]
        else:
            # SGLang's expert-parallel size is the group's: dense models (ep 1) load beside MoE ones in it.
            assert len({case[1] for case in cases} - {1}) <= 1
            parallel = ["--tp", tp, "--ep", max(case[1] for case in cases)]
        args = [*parallel, *(["--dtype", dtype] if dtype else []), *jobs] + (
            ["--sync", json.dumps(sync_spec)] if sync_spec else [])
        output = engine_python(f"{engine}_ranks.py", *args, shardload=True, env=hub_env)
    finally:
        for server in servers:
            server.stop()
    lines = engine_python("compare_ranks.py", *pairs).splitlines()
    allowed = [line for line in lines if ": allowed: " in line]
    differences = [line for line in lines if not line.endswith(": byte-equal") and line not in allowed]
    compared = len([p for p in pairs if p != "--fp8"]) // 2
    assert len(lines) >= compared and not differences, "\n".join(differences)
    return output + "".join(f"{line}\n" for line in allowed) + check_forward(forwards)


def sglang_post_processed(engine, quant):
    """Whether `export --engine sglang` of QUANT takes --engine-post-processed (its FP8 formats)."""
    return engine == "sglang" and quant != "none" and quant not in INT_WEIGHTS


def export_args(engine, tp, ep, quant, dtype=None):
    """`shardload export`'s flags for a case of check_engine (the checkpoint and --out aside)."""
    return ["--tp", tp, "--ep", ep, "--engine", engine,
            *(["--engine-post-processed"] if sglang_post_processed(engine, quant) else []),
            *(["--dtype", dtype] if dtype else [])]


# The export digests of every make-tiny case the engines accepted (export_digests.json): `make test-matrix`
# runs the live engines on every cell and checks that each export it accepted has the digest recorded here;
# `make test` re-makes each recorded export and checks its digest (test_export_digests.py), so a change to
# what shardload writes for any cell fails CI, and is accepted by running the matrix again with
# SHARDLOAD_ENGINE_DIGESTS=record, which rewrites the entries of the cases it ran.
DIGESTS = HERE / "export_digests.json"


def digest_key(engine, tp, case, dtype=None):
    """The entry of export_digests.json for check_engine's CASE ((family, ep) or (family, ep, quant))."""
    arch, ep, *quant = case
    return f"{engine} tp{tp} ep{ep} {arch} {quant[0] if quant else 'none'}" + (f" {dtype}" if dtype else "")


def parse_digest_key(key):
    """(engine, tp, (family, ep, quant), dtype) of an entry of export_digests.json."""
    engine, tp, ep, arch, quant, *dtype = key.split(" ")
    return engine, int(tp[2:]), (arch, int(ep[2:]), quant), (dtype[0] if dtype else None)


def directory_digest(folder):
    """tests/export_hashes.sh's hash of a folder: the sha256 of each file, sorted by path, hashed again."""
    folder = pathlib.Path(folder)
    lines = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  ./{f.relative_to(folder)}\n"
                    for f in sorted(folder.rglob("*"), key=lambda f: str(f.relative_to(folder)).encode())
                    if f.is_file())
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


@functools.cache
def _recorded_digests():
    """export_digests.json, read once a run (recording updates this dict and writes it whole)."""
    return json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def check_digest(key, export):
    """The export of case KEY against its recorded digest (SHARDLOAD_ENGINE_DIGESTS=record: records it)."""
    digest = directory_digest(export)
    recorded = _recorded_digests()
    if os.environ.get("SHARDLOAD_ENGINE_DIGESTS") == "record":
        recorded[key] = digest
        DIGESTS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        return
    assert recorded.get(key) == digest, (
        f"the export of {key!r} is {digest}, recorded {recorded.get(key)}: shardload writes other bytes than the "
        "engines last accepted; once this matrix passes, record them (SHARDLOAD_ENGINE_DIGESTS=record)")


# Cases that are another shape of a family's checkpoint: the family and make-tiny's flags for it.
# qwen3_moe-every-layer-moe: vLLM 0.33's GPTQ methods decide a fused layer's quantization by its parts' names
# (packed_modules_mapping), which its Qwen3-MoE model gives gate_up_proj only after its quantization config
# took a copy of it: a checkpoint with a dense layer (mlp_only_layers) builds that layer unquantized and
# fails its own load (AttributeError: 'MergedColumnParallelLinear' object has no attribute 'data'). Real
# Qwen3-MoE checkpoints have no dense layer.
VARIANTS = {"gemma4-dense": ("gemma4", ["--experts", "0"]),
            "qwen3_moe-every-layer-moe": ("qwen3_moe", ["--every-layer-moe"])}


def make_tiny_args(engine, arch):
    """make-tiny's --arch and flags for case ARCH (a family, or one of VARIANTS) of ENGINE."""
    family, flags = VARIANTS.get(arch, (arch, []))
    return ["--arch", family, *flags, *tiny_flags(engine, family)]


def tiny_flags(engine, arch):
    """make-tiny's flags for ENGINE's checkpoints of ARCH: SGLang's Qwen3-MoE holds no dense layer (it reads
    no mlp_only_layers), so its checkpoints have every layer MoE, as real Qwen3-MoE checkpoints do."""
    return ["--every-layer-moe"] if engine == "sglang" and arch == "qwen3_moe" else []


# The families forward_ranks.py computes.
FORWARD_FAMILIES = {"llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3"}
# Per-tensor FP8: the engines requantize a fused layer's parts to one scale in their post-processing.
REQUANTIZED = {"fp8", "ct-fp8-tensor"}
# llm-compressor's and GPTQ's integer weights (make-tiny --quant): kept as stored, cut on whole words and groups
# (int-quantized int8: on whole rows).
INT_WEIGHTS = ("ct-w4a16", "ct-w4a16-asym", "ct-w8a16", "ct-w8a8", "ct-nvfp4", "gptq", "gptq-channel", "awq",
               "modelopt-nvfp4")
# float32 on both sides, summed in another order: the logits' largest difference, relative to the largest.
FORWARD_TOLERANCE = 1e-5
# Per-tensor FP8 after the engine's post-processing: the engine's codes one code apart from shardload's on
# some fused MoE halves (compare_ranks.py --fp8).
FP8_FORWARD_TOLERANCE = 1e-2


def check_forward(forwards):
    """forward_ranks.py on FORWARDS ((requantized, [--transposed] CHECKPOINT DIR...) each): each DIR's
    forward pass, computed from its ranks' parameters as tensor-parallel ranks compute it, gives the first
    DIR's (the engine's own load's) logits bitwise, within FORWARD_TOLERANCE of transformers' forward pass of
    the checkpoint (an FP8 one dequantized), and its greedy tokens. Requantized (per-tensor FP8, after the
    engine's post-processing, whose requantization takes each model as far from the checkpoint's): the
    shardload loads' logits bitwise equal to each other, within FP8_FORWARD_TOLERANCE of the engine's own
    load's, with its greedy tokens. Returns a line per checkpoint."""
    if not forwards:
        return ""
    args = [a for _, group in forwards for a in [*group, "--"]][:-1]
    start = time.monotonic()
    results = json.loads(engine_python("forward_ranks.py", *args))
    report = f"forward passes: {len(results)} checkpoints in {time.monotonic() - start:.1f} s\n"
    for (requantized, _), result in zip(forwards, results):
        (own_dir, own), *loads = result["dirs"].items()
        if not requantized:
            assert own["relative_difference"] <= FORWARD_TOLERANCE, (
                f"{own_dir}: logits {own['relative_difference']:.3g} from transformers' (relative)")
            assert own["tokens"] == result["reference_tokens"], (
                f"{own_dir}: greedy tokens {own['tokens']}, transformers' {result['reference_tokens']}")
        for i, (directory, got) in enumerate(loads):
            name = os.path.basename(directory)
            if requantized:  # the first within the tolerance of the engine's own; the others bitwise the first
                assert i == 0 or got["bitwise_equal_to_previous"], f"{name}: logits differ from the other loads'"
                assert got["difference_to_first"] <= FP8_FORWARD_TOLERANCE, (
                    f"{name}: logits {got['difference_to_first']:.3g} from the engine's own load's (relative)")
            else:
                assert got["bitwise_equal_to_first"], f"{name}: logits differ from the engine's own load's"
            assert got["tokens"] == own["tokens"], (
                f"{name}: greedy tokens {got['tokens']}, the engine's {own['tokens']}")
        worst = max((got["difference_to_first"] for _, got in loads), default=0.0)
        compared = (f"{worst:.2g} from the engine's own after post-processing (relative; the engine's "
                    f"{own['relative_difference']:.2g} from transformers' of the dequantized checkpoint)"
                    if requantized else
                    f"bitwise the engine's own, {own['relative_difference']:.2g} from transformers'")
        report += (f"forward {os.path.basename(result['checkpoint'])}: {len(loads)} loads beside the engine's own, "
                   f"logits {compared}; greedy tokens {own['tokens']}\n")
    return report
