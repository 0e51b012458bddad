"""The tutorial "A first check of your vLLM" (``docs/tutorials/first-check-vllm.md``) run as it
is written, against the real vLLM (the CPU build, the shared ``vllm_qwen2`` server on the
realistic Qwen2): its matrix taken from the page, with only the model's folder and the
server's URL replaced by this machine's, in a folder with the page's ``pytest.ini``; then the
page's commands (``pytest``, ``pytest -k determinism``).

``--infercheck-num-prompts 6`` keeps the run short (the page's 20 prompts take four times as
long on 2 cores); the command line overrides the file's ``num_prompts``, so the file is the
page's. Not run here: the page's vLLM start command (a GPU install) and its step 4, a second
vLLM with an fp8 KV cache started by ``vllm serve`` (the CPU build starts by its module;
``tests/integration/test_vllm_diff.py`` measures that comparison).
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from conftest import REPO

pytestmark = pytest.mark.xdist_group("vllm")

PAGE = REPO / "docs" / "tutorials" / "first-check-vllm.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def test_the_tutorial_runs_as_written(
    pytester: pytest.Pytester, vllm_qwen2: str, realistic_qwen2: Any
) -> None:
    matrix = _blocks("yaml")[0]
    assert "/models/my-model" in matrix and "http://127.0.0.1:8000" in matrix
    matrix = matrix.replace("/models/my-model", str(realistic_qwen2.path))
    matrix = matrix.replace("http://127.0.0.1:8000", vllm_qwen2)
    pytester.makefile(".yaml", infercheck=matrix)
    (ini,) = _blocks("ini")
    pytester.makefile(".ini", pytest=ini)
    (block,) = [b for b in _blocks("bash") if b.startswith("pytest ")]
    commands = [c.split("#")[0].split() for c in block.splitlines()]
    assert commands[0] == ["pytest"] and commands[1] == ["pytest", "-k", "determinism"]

    everything = pytester.runpytest_subprocess(
        "--infercheck-num-prompts", "6", "-p", "no:cacheprovider"
    )
    # Per check: 6 prompt items (stress: its 2 levels) and the aggregate.
    everything.assert_outcomes(passed=7 + 7 + 7 + 3 + 7)
    out = everything.stdout.str()
    assert re.search(r"determinism\(mine\)\s+reasoning\s+mine@vllm\s+5\s+6/6\s+1\.0000", out), out
    assert re.search(r"c8\s+12\s+0\s+12/12\s+0", out), out  # 6 prompts x 2 repeats, 8 in flight

    one = pytester.runpytest_subprocess(
        "--infercheck-num-prompts", "6", "-p", "no:cacheprovider", "-k", "determinism"
    )
    one.assert_outcomes(passed=7)


def test_the_pages_init_command_writes_a_matrix_that_passes(
    pytester: pytest.Pytester, vllm_qwen2: str, realistic_qwen2: Any
) -> None:
    """Step 2's ``pytest-infercheck init --vllm URL --out my-checks``, its URL replaced by the
    shared server's: it finds the served folder, and ``pytest`` in ``my-checks`` passes."""
    (block,) = [b for b in _blocks("bash") if b.startswith("pytest-infercheck init")]
    words = block.split("#")[0].split()
    assert words == [
        "pytest-infercheck",
        "init",
        "--vllm",
        "http://127.0.0.1:8000",
        "--out",
        "my-checks",
    ]
    words[3] = vllm_qwen2
    done = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", *words[1:]],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"serving {realistic_qwen2.path}" in done.stdout
    out = pytester.path / "my-checks"
    matrix = (out / "infercheck.yaml").read_text()
    assert f'mine: {{path: "{realistic_qwen2.path}"}}' in matrix
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        cwd=out,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "11 passed" in run.stdout, run.stdout[-3000:]
    assert "PytestDeprecationWarning" not in run.stdout + run.stderr


def test_the_page_shows_what_it_ran() -> None:
    """The numbers the page quotes are those of this run: 31 items, cache-parity 6/6."""
    text = PAGE.read_text()
    assert "gave 31 passing items" in text
    assert re.search(r"cache-parity\(mine\)\s+reasoning\s+mine@vllm\s+6/6", text)
