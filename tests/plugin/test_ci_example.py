"""examples/ci: the engine-upgrade gate runs as shipped, its workflow only uses options that
exist, and the gate fails when the engine changes (the 4-bit model standing in for it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

CI = REPO / "examples" / "ci"


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def _workflow_commands() -> list[str]:
    workflow = yaml.safe_load((CI / "upgrade-gate.yml").read_text())
    return [
        " ".join(step["run"].split())
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if "run" in step
    ]


def test_workflow_uses_only_existing_options() -> None:
    commands = _workflow_commands()
    gate = next(c for c in commands if c.startswith("python -m pytest"))
    options = set(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", gate))
    assert {"--infercheck-shard", "--infercheck-results", "--html"} <= options
    help_text = _pytest(CI, "--help").stdout
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text), option
    report = next(c for c in commands if c.startswith("pytest-infercheck report"))
    usage = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "report", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-o" in usage and report.endswith("-o infercheck-report.html")


def test_gate_passes_as_shipped(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    done = _pytest(CI, f"--infercheck-results={results}")
    assert done.returncode == 0, done.stdout[-3000:]
    data = json.loads(results.read_text())
    aggregates = {i["check"]: i for i in data["items"] if i["role"] == "aggregate"}
    gate = aggregates["compare(golden.adder-v1-vs-adder)"]
    assert gate["outcome"] == "passed"
    (level,) = gate["data"]["levels"]
    assert level["n_prompts"] == 60 and level["n_flips"] == 0 and level["kl_max"] < 1e-5
    assert "golden:adder-v1" in gate["data"]["engines"]


def test_gate_fails_when_the_engine_changes(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    work = tmp_path / "ci"
    shutil.copytree(CI, work, ignore=shutil.ignore_patterns("*.html", "*.json.tmp"))
    matrix = (work / "infercheck.yaml").read_text()
    matrix = matrix.replace("../models/tiny-adder", str(tiny_models["q4"]))
    matrix = matrix.replace("../quickstart/", str(REPO / "examples" / "quickstart") + "/")
    (work / "infercheck.yaml").write_text(matrix)
    done = _pytest(work, "-q", "-k", "compare")
    assert done.returncode == 1, done.stdout[-3000:]
    assert re.search(r"compare\(golden\.adder-v1-vs-adder\)::addition::aggregate", done.stdout)
    assert "correct_to_wrong" in done.stdout or "flip" in done.stdout


@pytest.fixture(autouse=True)
def _inner_ini() -> None:
    """examples/ci is its own pytest project; no pytester ini is written here."""
