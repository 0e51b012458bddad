"""The quickstart, run once per test session (per xdist worker) on the tiny models: its
results, terminal output and HTML report, for the tests of the demo's outcome
(``test_quickstart.py``) and of its report in a browser (``test_report_browser.py``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
"""The repository (computed here, not imported from the root conftest: a pytester project's
own conftest.py that imports this module through tests.plugin.conftest would shadow it)."""
QUICKSTART = REPO / "examples" / "quickstart"


@dataclass(frozen=True)
class QuickstartRun:
    returncode: int
    stdout: str
    results: dict[str, Any]
    nodeids: list[str]  # from --collect-only, in collection order
    collected: int  # the "N tests collected" of --collect-only
    seconds: float  # wall time of the full run
    work: Path
    models: dict[str, Path]


def _pytest(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={**outside_xdist(os.environ), "COLUMNS": "300"},  # -rf lines whole
    )


def outside_xdist(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without pytest-xdist's variables: the quickstart is its own run, in one
    process, even when this module runs in an xdist worker (``-n 2``), whose
    ``PYTEST_XDIST_WORKER`` the run would otherwise inherit and take for its own (stress
    records it as ``measured_by``: ``gw1`` where the snapshot says ``main``)."""
    return {k: v for k, v in environ.items() if not k.startswith("PYTEST_XDIST_")}


@pytest.fixture(scope="session")
def quickstart_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]
) -> QuickstartRun:
    """The quickstart, run once for the session on the tiny models made by ``tiny_models``."""
    work = tmp_path_factory.mktemp("quickstart") / "quickstart"
    shutil.copytree(QUICKSTART, work, ignore=shutil.ignore_patterns("models", "report.html"))
    matrix = (work / "infercheck.yaml").read_text()
    for name in ("bf16", "q8", "q4"):
        matrix = matrix.replace(f"models/tiny-{name}", str(tiny_models[name]))
    (work / "infercheck.yaml").write_text(matrix)

    listed = _pytest(work, "--collect-only")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    lines = listed.stdout.splitlines()
    nodeids = [line for line in lines if "::" in line]
    counts = [m for line in lines if (m := re.match(r"(\d+) tests? collected", line))]
    assert len(counts) == 1, listed.stdout[-3000:]

    started = time.monotonic()
    done = _pytest(
        work, "--infercheck-results=r.json", "-rf", "--html=report.html", "--self-contained-html"
    )
    seconds = time.monotonic() - started
    results_file = work / "r.json"
    assert results_file.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return QuickstartRun(
        returncode=done.returncode,
        stdout=done.stdout,
        results=json.loads(results_file.read_text()),
        nodeids=nodeids,
        collected=int(counts[0].group(1)),
        seconds=seconds,
        work=work,
        models=tiny_models,
    )
