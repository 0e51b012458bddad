"""``pytest-infercheck report``: exit status, messages and the HTML it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.cli import main

from .test_results import SHARD_1, SHARD_2, UNTRUSTED, comparison, item, results


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_report_merges_shards_and_puts_runs_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = results([item("a", "prompt", comparison("a", [0.1], "unchanged", text=UNTRUSTED))])
    other["run"]["run_id"] = "local-run"
    paths = [
        write(tmp_path / "s1.json", SHARD_1),
        write(tmp_path / "s2.json", SHARD_2),
        write(tmp_path / "local.json", other),
    ]
    out = tmp_path / "out" / "report.html"
    assert main(["report", *map(str, paths), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    html = out.read_text()
    assert "run 1 (ci-1)" in html and "run 2 (local-run)" in html and "run 3" not in html
    assert "<script>alert" not in html  # the untrusted prompt text is escaped


def test_a_missing_shard_is_a_warning_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s1.json", SHARD_1)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert err == (
        "pytest-infercheck: warning: run ci-1: shard(s) 2/2 missing; its numbers cover the others\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (
            "{",
            "not valid JSON (line 1, column 2: Expecting property name enclosed in double quotes)",
        ),
        (
            {**results([]), "version": 99},
            "results format version 99; this pytest-infercheck reads versions 1 and 2",
        ),
        (
            {"hello": "world"},
            "not a pytest-infercheck results file (no 'schema': 'pytest-infercheck-results')",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, message: str
) -> None:
    good = write(tmp_path / "good.json", SHARD_1)
    bad = tmp_path / "bad.json"
    if content is not None:
        write(bad, content)
    out = tmp_path / "report.html"
    assert main(["report", str(good), str(bad), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"pytest-infercheck: error: {bad}: {message}\n"
    assert not out.exists()


def test_overlapping_shards_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "s1.json", SHARD_1)
    copy = write(tmp_path / "copy.json", SHARD_1)
    assert main(["report", str(path), str(copy), "-o", str(tmp_path / "r.html")]) == 2
    assert "are both shard 1/2 of run ci-1" in capsys.readouterr().err


def test_the_module_runs_as_a_program_and_usage_errors_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path / "s1.json", SHARD_1)
    ok = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "report", str(path), "-o", "r.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and (tmp_path / "r.html").exists(), ok.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "report"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert usage.returncode == 2 and "the following arguments are required: RESULTS" in usage.stderr
