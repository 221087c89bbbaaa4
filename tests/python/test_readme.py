"""The README's command-line quick start runs as written, from a clone: every shell block of that section, in
order, in one bash -euo pipefail script from the repository root. Only what a test must not share with a user
is replaced: the binary (the build under test), the demo model (made here as make demo makes it),
/tmp/shardload-readme (a temporary directory), the server's name and port (free ones)."""
import os
import re
import shutil
import socket
import subprocess
import uuid

import pytest

from conftest import REPO, run_shardload, shardload_bin


def next_steps_blocks() -> list:
    text = (REPO / "README.md").read_text()
    start = text.index("\n## Quick start: the command line\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```sh\n(.*?)```", text[start:end], flags=re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_next_steps_section_has_every_step():
    script = "\n".join(next_steps_blocks())
    for command in ("inspect", "make-tiny --config", "plan", "load", "export", "serve"):
        assert f"build/shardload {command}" in script, command


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (scripts/install-deps.sh installs it)")
def test_the_next_steps_run_from_a_clone(tmp_path):
    model = tmp_path / "tiny-qwen3-moe"
    run_shardload("make-tiny", "--arch", "qwen3_moe", "--out", model, "--seed", "1")
    name = f"readme-{uuid.uuid4().hex[:8]}"
    port = str(free_port())
    script = "\n".join(next_steps_blocks())
    # The script runs from the repository root: a relative $SHARDLOAD_BIN is taken from here first.
    script = script.replace("build/shardload", os.path.abspath(shardload_bin()))
    script = script.replace("build/tiny-qwen3-moe", str(model))
    script = script.replace("/tmp/shardload-readme", str(tmp_path / "out"))
    script = script.replace("shardload-readme", f"shardload-{name}").replace("--name readme", f"--name {name}")
    script = script.replace("30000", port)
    # The sanitizer runtimes ctest preloads into the interpreter are not for bash and curl (the binaries
    # under test link their own).
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    # What each step printed: the layout planned, the checksums of the load and of the export's load equal.
    assert "listening on" in result.stdout
    sums = re.findall(r"^\d+\t\S+\t\S+\t\S+\t[0-9a-f]{16}$", result.stdout, flags=re.M)
    assert sums and len(sums) % 2 == 0, result.stdout
    assert sums[: len(sums) // 2] == sums[len(sums) // 2 :], result.stdout
    assert not os.path.exists(f"/dev/shm/shardload-{name}")
