"""Every engine cell's export, as the live engines last accepted it (export_digests.json, recorded by the
cell matrix: test_vllm.py, test_vllm_int.py, test_sglang.py under `make test-matrix`): make-tiny's checkpoint
of the case, `shardload export --engine` with the case's flags, and the digest of what it wrote must be the one
recorded. No engine runs here (the shardload binary only), so `make test` checks what shardload writes for every
cell of docs/engines.md's tables on every run, and the matrix checks that the engines hold it."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from engines import BIN, DIGESTS, cli, directory_digest, export_args, make_tiny_args, parse_digest_key

RECORDED = json.loads(DIGESTS.read_text())
needs_binary = pytest.mark.skipif(not BIN, reason="SHARDLOAD_BIN not set")


def test_the_digests_cover_every_engine_and_format():
    """The record is the matrix's: both engines, tp 2 and tp 4, dense, MoE with EP, MLA and every format the
    engines' tables take (a record cut short would pass the test below on fewer cells)."""
    cases = [parse_digest_key(key) for key in RECORDED]
    assert {engine for engine, *_ in cases} == {"vllm", "sglang"}
    assert {tp for _, tp, *_ in cases} == {2, 4}
    families = {arch for _, _, (arch, _, _), _ in cases}
    assert {"llama", "qwen3_moe", "deepseek_v3"} <= families
    assert any(ep > 1 for _, _, (_, ep, _), _ in cases)
    formats = {quant for _, _, (_, _, quant), _ in cases}
    assert {"none", "fp8", "fp8-block", "ct-fp8-tensor", "ct-fp8-channel", "ct-fp8-block", "mxfp4", "ct-w4a16",
            "ct-w4a16-asym", "ct-w8a16", "ct-w8a8", "ct-nvfp4", "modelopt-nvfp4", "gptq", "gptq-channel",
            "awq"} <= formats


@needs_binary
def test_every_recorded_export_is_written_again(tmp_path):
    """Each recorded case exported again (make-tiny's checkpoints made once each), two at a time."""
    checkpoints = {}
    for key in RECORDED:
        engine, _, (arch, _, quant), _ = parse_digest_key(key)
        flags = (*make_tiny_args(engine, arch), "--quant", quant)
        checkpoints.setdefault(flags, tmp_path / f"model-{len(checkpoints)}")
    for flags, folder in checkpoints.items():
        cli("make-tiny", *flags, "--out", folder)

    def export(index_key):
        index, key = index_key
        engine, tp, (arch, ep, quant), dtype = parse_digest_key(key)
        out = tmp_path / f"export-{index}"
        cli("export", checkpoints[(*make_tiny_args(engine, arch), "--quant", quant)],
            *export_args(engine, tp, ep, quant, dtype), "--threads", 1, "--out", out)
        return key, directory_digest(out)

    with ThreadPoolExecutor(max_workers=2) as pool:
        found = dict(pool.map(export, enumerate(RECORDED)))
    changed = [f"{key}: {found[key]}, recorded {digest}" for key, digest in RECORDED.items() if found[key] != digest]
    assert not changed, ("shardload writes other bytes than the engines last accepted for these cells (run the "
                         "engines' matrix, `make test-matrix`; once it passes, record them with "
                         "SHARDLOAD_ENGINE_DIGESTS=record):\n" + "\n".join(changed))
