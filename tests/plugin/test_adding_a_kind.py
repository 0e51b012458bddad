"""Adding a check kind touches its own module and the registry, nothing else.

The test copies the package, writes one new kind module (``prompt-budget``: every prompt of a
suite must fit a character budget; no model is loaded) and adds it to ``checks/registry.py``
(one line). Then a matrix that uses the new kind runs through everything that
asks the registry: the YAML config, collection and node ids, items and the aggregate, the
terminal summary, the JSON results, the HTML report (the kind's own view), xdist and the
matrix's JSON Schema.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_infercheck
from tests.htmldom import parse
from tests.plugin.test_html_report import report_parts

KIND_MODULE = '''\
"""prompt-budget: every prompt fits ``max_chars`` characters (an example kind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ..render.markup import esc
from ..render.table import check_table
from ..specs import TARGET_THRESHOLDS, TargetCheck
from .protocol import Aggregates, CheckKind, ItemPlan, Outcome, TargetRun, target_label


class PromptBudgetSpec(TargetCheck):
    """Each prompt of the suite is at most ``max_chars`` characters long."""

    max_chars: int = Field(default=100, ge=1)


class PromptBudgetRun(TargetRun):
    def run_item(self, plan: ItemPlan) -> Outcome:
        size = len(self.prompt(plan.key).text)
        limit = self.check.spec.max_chars
        violations = [f"{size} characters > max_chars {limit}"] if size > limit else []
        properties = [("infercheck_chars", size)]
        return Outcome(violations, f"prompt {plan.key}", {"chars": size}, properties)

    def aggregate(self) -> Outcome:
        sizes = [len(p.text) for p in self.scope_prompts()]
        return Outcome(data={"target": "-", "prompts": len(sizes), "longest": max(sizes)})


def summary_lines(aggregates: Aggregates) -> list[str]:
    return check_table(aggregates, (("longest", ">"),), lambda d: [str(d["longest"])])


def budget_view(data: Mapping[str, Any]) -> str:
    return f'<p class="budget">{esc(data.get("chars"))} characters</p>'


PROMPT_BUDGET = CheckKind(
    name="prompt-budget",
    spec=PromptBudgetSpec,
    run=PromptBudgetRun,
    label=target_label,
    thresholds=TARGET_THRESHOLDS,
    family="prompt-budget",
    summary_lines=summary_lines,
    views={"prompt": budget_view},
)
'''

SUITE = """\
{"id": "short", "prompt": "1+1="}
{"id": "long", "prompt": "Please add these two numbers and explain every step: 12+34="}
"""

MATRIX = """\
models:
  m: {repo: example/no-model-is-loaded}
suites: [budget.jsonl]
checks:
  - prompt-budget: {target: m, max_chars: 20}
"""


def add_kind(package: Path) -> list[str]:
    """Write the kind's module and register it; the registry lines that changed."""
    (package / "checks" / "prompt_budget.py").write_text(KIND_MODULE)
    registry = package / "checks" / "registry.py"
    before = registry.read_text().splitlines()
    text = registry.read_text()
    text = text.replace(
        '    ("cache-pollution", ".cache_pollution", "CACHE_POLLUTION"),\n)',
        '    ("cache-pollution", ".cache_pollution", "CACHE_POLLUTION"),\n'
        '    ("prompt-budget", ".prompt_budget", "PROMPT_BUDGET"),\n)',
    )
    registry.write_text(text)
    return sorted(set(text.splitlines()) - set(before))


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    package = tmp_path / "src" / "pytest_infercheck"
    shutil.copytree(
        Path(pytest_infercheck.__file__).parent,
        package,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    changed = add_kind(package)
    assert changed == ['    ("prompt-budget", ".prompt_budget", "PROMPT_BUDGET"),']
    work = tmp_path / "work"
    work.mkdir()
    (work / "budget.jsonl").write_text(SUITE)
    (work / "infercheck.yaml").write_text(MATRIX)
    (work / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    return work, env


def _pytest(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_new_kind_runs_through_config_collection_reports_and_xdist(
    project: tuple[Path, dict[str, str]],
) -> None:
    work, env = project
    done = _pytest(
        work, env, "-rf", "--infercheck-results=r.json", "--html=r.html", "--self-contained-html"
    )
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    assert "FAILED infercheck.yaml::prompt-budget(m)::budget::long" in out
    assert "59 characters > max_chars 20" in out
    summary = out.split("infercheck summary", 1)[1]
    assert "prompt-budget(m)  budget" in summary and "59" in summary

    items = {i["nodeid"]: i for i in json.loads((work / "r.json").read_text())["items"]}
    assert sorted(items) == [
        "infercheck.yaml::prompt-budget(m)::budget::aggregate",
        "infercheck.yaml::prompt-budget(m)::budget::long",
        "infercheck.yaml::prompt-budget(m)::budget::short",
    ]
    long = items["infercheck.yaml::prompt-budget(m)::budget::long"]
    assert (long["kind"], long["role"], long["outcome"]) == ("prompt-budget", "prompt", "failed")
    assert long["data"] == {"chars": 59} and "max_chars" not in long["thresholds"]
    _, tests = report_parts(work / "r.html")
    (long_test,) = tests["infercheck.yaml::prompt-budget(m)::budget::long"]
    detail = parse("".join(e["content"] for e in long_test["extras"]))
    assert detail.one("p", "budget").text() == "59 characters"  # the kind's own view

    spread = _pytest(work, env, "-n", "2", "-q")
    assert spread.returncode == 1 and "1 failed, 2 passed" in spread.stdout, spread.stdout[-2000:]


def test_the_new_kind_is_validated_like_the_others(project: tuple[Path, dict[str, str]]) -> None:
    work, env = project
    (work / "infercheck.yaml").write_text(MATRIX.replace("max_chars: 20", "max_chars: 0"))
    done = _pytest(work, env, "--collect-only", "-q")
    assert done.returncode != 0
    assert "infercheck.yaml:5: checks[0].prompt-budget.max_chars" in done.stdout


def test_the_new_kind_is_in_the_matrix_schema(project: tuple[Path, dict[str, str]]) -> None:
    work, env = project
    done = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "schema"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    schema = json.loads(done.stdout)
    assert "prompt-budget" in json.dumps(schema["$defs"]["CheckSpec"])
