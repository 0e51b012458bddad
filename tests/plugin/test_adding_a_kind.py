"""Adding a check kind touches its own package and the registry, nothing else.

The test copies the package, writes one new kind package of facets (``prompt-budget``: every
prompt of a suite must fit a character budget; no model is loaded; a suite gate on the
longest prompt) and adds it to ``checks/registry.py`` (one line). Then a matrix that uses the
new kind runs through everything that asks the registry: the YAML config, collection and
node ids, items and the aggregate, the terminal summary, the JSON results, the HTML report
(the kind's own view), xdist, a sharded run merged, and the matrix's JSON Schema.
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

KIND_FILES = {
    "__init__.py": '''\
"""prompt-budget: every prompt fits ``max_chars`` characters (an example kind, as a package
of facets: spec, gather, judge, summarize, present)."""

from ..framework.kind import CheckKind
from .gather import BudgetGather
from .judge import judge, summarize
from .present import PRESENT
from .spec import SPEC

PROMPT_BUDGET = CheckKind(
    "prompt-budget", SPEC, gather=BudgetGather, judge=judge, summarize=summarize, present=PRESENT
)
''',
    "spec.py": '''\
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ...specs import KindThresholds, TargetCheck
from ...verdict.gate import Gate
from ..framework.kind import SpecFacet
from ..framework.target import TargetContext, target_label


class PromptBudgetSpec(TargetCheck):
    """Each prompt of the suite is at most ``max_chars`` characters long."""

    max_chars: int = Field(default=100, ge=1)


class BudgetThresholds(KindThresholds):
    """``max_longest``: suite gate on the longest prompt, in characters."""

    max_longest: int | None = Field(default=None, ge=1)


@dataclass
class BudgetPrompt:
    chars: int
    limit: int


@dataclass
class BudgetAggregate:
    target: str
    prompts: int
    longest: int
    engines: dict[str, dict[str, Any]]


GATES = (Gate("max_longest", "longest", "max", "longest prompt", scope="suite"),)
SPEC = SpecFacet(
    options=PromptBudgetSpec,
    thresholds=BudgetThresholds,
    gates=GATES,
    label=target_label,
    context=TargetContext,
    records={"prompt": BudgetPrompt, "aggregate": BudgetAggregate},
)
''',
    "gather.py": """\
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...verdict.conduct import Conduct
from ..framework.plan import ItemPlan
from ..framework.target import TargetContext, TargetGatherer
from .spec import PromptBudgetSpec


@dataclass
class BudgetEvidence:
    chars: int
    limit: int
    measures: dict[str, Any] = field(default_factory=dict)
    conduct: Conduct = field(default_factory=Conduct)


class BudgetGather(TargetGatherer[PromptBudgetSpec]):
    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        return {
            p.full_name: BudgetEvidence(len(self.run.prompt(p.key).text), self.spec.max_chars)
            for p in plans
        }

    def context(self) -> TargetContext:
        return TargetContext(self.spec.target, {})  # no model is loaded
""",
    "judge.py": """\
from collections.abc import Sequence
from typing import Any

from ...verdict.gate import Violation
from ..framework.items import RecordedItem, Summary, records_of
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from ..framework.target import TargetContext
from .gather import BudgetEvidence
from .spec import BudgetAggregate, BudgetPrompt


def judge(plan: ItemPlan, evidence: BudgetEvidence, thresholds: Any) -> Judged:
    over = evidence.chars > evidence.limit
    text = f"{evidence.chars} characters > max_chars {evidence.limit}"
    violations = [Violation(text, "max_chars")] if over else []
    return Judged(BudgetPrompt(evidence.chars, evidence.limit), violations)


def summarize(items: Sequence[RecordedItem], thresholds: Any, context: TargetContext) -> Summary:
    sizes = [r.chars for r in records_of(items, "prompt")]
    record = BudgetAggregate(context.target, len(sizes), max(sizes), context.engines)
    return Summary(record, [], measures={"longest": float(record.longest)})
""",
    "present.py": """\
from collections.abc import Mapping
from typing import Any

from ...render.markup import esc
from ...render.table import check_table
from ..framework.kind import Aggregates, PresentFacet


def summary_lines(aggregates: Aggregates) -> list[str]:
    return check_table(aggregates, (("longest", ">"),), lambda d: [str(d["longest"])])


def budget_view(data: Mapping[str, Any]) -> str:
    return f'<p class="budget">{esc(data.get("chars"))} characters</p>'


PRESENT = PresentFacet(
    family="prompt-budget",
    describe=lambda record: f"a prompt of {record.chars} characters",
    properties=lambda record: [("infercheck_chars", record.chars)],
    summary_lines=summary_lines,
    views={"prompt": budget_view},
)
""",
}
"""The new kind's package ``checks/prompt_budget/``, file by file."""

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
    """Write the kind's package and register it; the registry lines that changed."""
    (package / "checks" / "prompt_budget").mkdir()
    for name, text in KIND_FILES.items():
        (package / "checks" / "prompt_budget" / name).write_text(text)
    registry = package / "checks" / "registry.py"
    before = registry.read_text().splitlines()
    text = registry.read_text()
    text = text.replace(  # after the last line of _MODULES, whichever kind it is
        '),\n)\n"""``(YAML key',
        '),\n    ("prompt-budget", ".prompt_budget", "PROMPT_BUDGET"),\n)\n"""``(YAML key',
        1,
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
    assert long["data"] == {"chars": 59, "limit": 20} and "max_chars" not in long["thresholds"]
    aggregate = items["infercheck.yaml::prompt-budget(m)::budget::aggregate"]
    assert aggregate["outcome"] == "failed"  # an aggregate fails when one of its items fails
    assert aggregate["violations"] == ["1 of 2 items failed: long (59 characters > max_chars 20)"]
    _, tests = report_parts(work / "r.html")
    (long_test,) = tests["infercheck.yaml::prompt-budget(m)::budget::long"]
    detail = parse("".join(e["content"] for e in long_test["extras"]))
    assert detail.one("p", "budget").text() == "59 characters"  # the kind's own view

    spread = _pytest(work, env, "-n", "2", "-q")
    assert spread.returncode == 1 and "2 failed, 1 passed" in spread.stdout, spread.stdout[-2000:]


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


def test_the_new_kind_merges_its_shards_into_the_unsharded_aggregate(
    project: tuple[Path, dict[str, str]],
) -> None:
    """Every kind merges: ``pytest-infercheck report --json`` recomputes the new kind's
    aggregate from the two shards' item records with its own ``summarize``."""
    work, env = project
    _pytest(work, env, "-q", "--infercheck-results=whole.json")
    for shard in ("1/2", "2/2"):
        name = f"shard{shard[0]}.json"
        _pytest(work, env, "-q", f"--infercheck-shard={shard}", f"--infercheck-results={name}")
    report = ["report", "shard1.json", "shard2.json", "-o", "m.html", "--json", "merged.json"]
    merged = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", *report],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert merged.returncode == 1, merged.stderr  # the merged aggregate fails for item long
    assert "1 of 2 items failed: long (59 characters > max_chars 20)" in merged.stderr
    whole, union = (json.loads((work / f).read_text()) for f in ("whole.json", "merged.json"))
    assert union["schema"] == whole["schema"] and union["version"] == whole["version"]

    def aggregate(results: dict[str, object]) -> dict[str, object]:
        items = results["items"]
        assert isinstance(items, list)
        return next(i for i in items if i["role"] == "aggregate")

    assert (
        aggregate(union)["data"]
        == aggregate(whole)["data"]
        == {
            "target": "m",
            "prompts": 2,
            "longest": 59,
            "engines": {},
        }
    )
    assert aggregate(union)["outcome"] == aggregate(whole)["outcome"] == "failed"
    assert aggregate(union)["violations"] == aggregate(whole)["violations"]


def test_a_threshold_the_new_kind_does_not_use_is_an_error_at_its_line(
    project: tuple[Path, dict[str, str]],
) -> None:
    work, env = project
    (work / "infercheck.yaml").write_text(MATRIX + "    max_kl: 0.1\n    min_determinism: 1\n")
    done = _pytest(work, env, "--collect-only", "-q")
    assert done.returncode != 0
    assert (
        "infercheck.yaml:6: checks[0].max_kl: prompt-budget does not use max_kl "
        "(compare, sweep, diff do)" in done.stdout
    )
    assert (
        "infercheck.yaml:7: checks[0].min_determinism: prompt-budget does not use "
        "min_determinism (determinism does)" in done.stdout
    )
