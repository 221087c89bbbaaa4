"""The official safetensors package must accept every .safetensors file shardload writes: make-tiny's
checkpoints (every family, every weight format), the command line's exports, the Python API's exports and
the Python package's own writer (what `shardload.verify` tests write)."""
import shardload
import torch
from shardload.safetensors_io import save_file

from producers import DENSE, MOE, NO_FP8_CHECKPOINTS, cli, layout, needs_producers, open_with_official_safetensors

pytestmark = needs_producers

QUANTS = ["none", "fp8", "fp8-block", "ct-fp8-tensor", "ct-fp8-channel", "ct-fp8-block"]


def test_the_official_safetensors_opens_every_file_shardload_writes(tmp_path):
    dirs = []
    for arch in DENSE + MOE:
        for quant in QUANTS:
            if quant != "none" and arch in NO_FP8_CHECKPOINTS:
                continue
            model = tmp_path / f"{arch}-{quant}"
            cli("make-tiny", "--arch", arch, "--quant", quant, "--out", model)
            dirs.append(model)
            if quant in ("none", "fp8-block", "ct-fp8-tensor"):
                out = tmp_path / f"export-{arch}-{quant}"
                cli("export", model, *layout(arch, 2), "--out", out)
                dirs.append(out)
    # gpt-oss as the Hub stores it: MXFP4 experts (U8 blocks and scales), kept so in the export.
    model = tmp_path / "gpt_oss-mxfp4"
    cli("make-tiny", "--arch", "gpt_oss", "--quant", "mxfp4", "--out", model)
    cli("export", model, *layout("gpt_oss", 2), "--out", tmp_path / "export-gpt_oss-mxfp4")
    dirs += [model, tmp_path / "export-gpt_oss-mxfp4"]
    api = tmp_path / "api-export"
    shardload.export(tmp_path / "qwen3_moe-fp8", api, tp=2, ep=2, max_file_size=1 << 20)
    dirs.append(api)
    writer = tmp_path / "writer"
    writer.mkdir()
    save_file(str(writer / "x.safetensors"), {"w": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4),
                                              "q": torch.arange(8, dtype=torch.uint8)},
              {"format": "pt"}, dtypes={"q": "F8_E4M3"})
    dirs.append(writer)
    assert open_with_official_safetensors(*dirs) > 200
