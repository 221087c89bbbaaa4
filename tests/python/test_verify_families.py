"""`shardload.verify` on every family in every FP8 format (the bulk of the verify tests, in a file of its own
so that ctest runs it beside test_verify.py)."""
import pytest

from verify_helpers import DENSE, MOE, binary_for_export, check, layout_args  # noqa: F401 (an autouse fixture)


# Every family unquantized, and each FP8 format on a dense, a MoE and an MLA family, in `make test`; the other
# families' FP8 formats are the matrix's (`make test-matrix`: python_test_verify_families_matrix).
CORE = ("llama", "qwen3_moe", "deepseek_v3")
CASES = [pytest.param(arch, quant, marks=() if quant == "none" or arch in CORE else pytest.mark.matrix)
         for quant in ["none", "fp8", "fp8-block", "dynamic"] for arch in DENSE + MOE]


@pytest.mark.parametrize("arch, quant", CASES)
def test_every_family_and_format_passes(tiny, arch, quant):
    model = tiny(arch, "none" if quant == "dynamic" else quant)
    report, layout = check(model, layout_args(arch, ["--quantization", "fp8"] if quant == "dynamic" else []))
    assert layout["quantization"] == {"dynamic": "fp8-dynamic"}.get(quant, quant)
    modules = {c.module.split(" ", 2)[-1] for c in report.checks}
    assert any(m.endswith(("qkv_proj", "q_proj", "q_b_proj")) for m in modules) and "self_attn.o_proj" in modules
    assert any("experts.w2" in m for m in modules) == (arch in MOE)
    assert "model.embed_tokens.weight" in modules
