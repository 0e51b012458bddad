"""The demo's outcome, as the README states it: 8-bit fails one item (1+0) and passes its
suite gates; 4-bit fails 9 items and both suite gates; the sweep and the engine checks
(determinism, batch invariance, stress on in-process mlx-lm) pass."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

QUICKSTART = REPO / "examples" / "quickstart"


@pytest.fixture(autouse=True)
def _inner_ini() -> None:
    """The quickstart is its own pytest project; no pytester ini is written here."""


def test_demo_outcome_is_what_the_readme_says(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    work = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, work, ignore=shutil.ignore_patterns("models", "report.html"))
    matrix = (work / "infercheck.yaml").read_text()
    for name in ("bf16", "q8", "q4"):
        matrix = matrix.replace(f"models/tiny-{name}", str(tiny_models[name]))
    (work / "infercheck.yaml").write_text(matrix)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--infercheck-results=r.json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:]
    items = json.loads((work / "r.json").read_text())["items"]
    failed = {(i["check"], i["name"]) for i in items if i["outcome"] != "passed"}
    q8 = {name for check, name in failed if check == "compare(bf16-vs-q8)"}
    q4 = {name for check, name in failed if check == "compare(bf16-vs-q4)"}
    assert q8 == {"e11"}  # 1+0: the one flip; the suite gates pass
    assert "aggregate" in q4 and len(q4 - {"aggregate"}) == 9
    assert {check for check, _ in failed} == {"compare(bf16-vs-q8)", "compare(bf16-vs-q4)"}
    (q4_gates,) = [
        i for i in items if i["check"] == "compare(bf16-vs-q4)" and i["role"] == "aggregate"
    ]
    assert len(q4_gates["violations"]) == 2  # flip rate and mean KL
    kinds = {i["kind"] for i in items if i["outcome"] == "passed" and i["role"] == "aggregate"}
    assert kinds == {"compare", "sweep", "determinism", "batch-invariance", "stress"}  # q8 gates
