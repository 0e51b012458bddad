"""The fault matrix's runs: one pytest run per check kind covering all its faults.

A kind's run has one check per fault, named after it (``determinism(nan)``,
``determinism(empty-body)``, ...), whose target is a faulty backend (see
:mod:`tests.faults`), and one control check on the faithful backend (``determinism(none)``).
Its JSON results give each check's verdict and the text of its failures
(:func:`verdicts`); the tests compare them with :data:`tests.faults.EXPECTED`.

The runs are memoised per module and kind (:class:`RunCache`): every (kind, fault) test of a
kind reads the verdicts of the one run that the first of them made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tests.faults import PASS, Fault, Mode, backend_name, message_names
from tests.faults import expected as expected_for
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

CONTROL = "none"
"""The name of a run's control check (the faithful backend)."""
GOLDEN = "adder-v1"

COMPARISON_KINDS = frozenset({"compare", "sweep", "diff", "golden"})
"""Kinds whose faulty side is compared with another (faithful) side: ``faulty-`` backends;
the others compare a target with itself: ``flaky-`` backends (see :mod:`tests.faults`)."""

CONFTEST = f"""\
import sys

sys.path.insert(0, {str(REPO)!r})  # the repository's tests package, in a subprocess too

from tests.faults import pytest_infercheck_wrap_backend  # noqa: E402, F401
"""


FAULTY_NAME = re.compile("|".join(f"{m.value}-[a-z-]+" for m in Mode))


def mode_of(kind: str) -> Mode:
    return Mode.ALWAYS if kind in COMPARISON_KINDS else Mode.AFTER_FIRST


def check_entry(kind: str, name: str, backend: str, faithful: str, model: str = "adder") -> str:
    """One ``checks:`` entry of ``kind`` named ``name`` whose test side is ``backend`` (and
    whose baseline, for a comparison, is ``faithful``), on the matrix's ``model``. Small on
    purpose: the matrix runs in every CI run."""
    target = f"{model}@{backend}"
    body = {
        "compare": f"compare: {{baseline: {model}@{faithful}, test: {target}}}",
        "sweep": f"sweep: {{baseline: {model}@{faithful}, models: [{target}]}}",
        "diff": f"diff: {{model: {model}, backends: [{faithful}, {backend}]}}",
        "golden": f'compare: {{baseline: "golden:{GOLDEN}", test: {target}}}',
        # max_logprob_drift: drifting logprobs with the same tokens are a failure here.
        "determinism": f"determinism: {{target: {target}, runs: 3}}\n    max_logprob_drift: 1.0e-6",
        "stress": f"stress: {{target: {target}, levels: [2], repeats: 1}}",
        "batch-invariance": f"batch-invariance: {{target: {target}, trials: 1, batch_size: 3}}",
        "stream-parity": f"stream-parity: {{target: {target}}}",
        "endpoint-parity": f"endpoint-parity: {{target: {target}, endpoints: [completions, chat]}}",
        "cache-pollution": f"cache-pollution: {{target: {target}, hostile: [special-tokens]}}",
    }[kind]
    return f"  - {body}\n    name: {name}\n"


def checks_block(
    kind: str, faults: Iterable[Fault], faithful: str, backend_for: Callable[[Fault], str]
) -> str:
    """The control check, then one check per fault."""
    out = check_entry(kind, CONTROL, faithful, faithful)
    for fault in faults:
        out += check_entry(kind, fault.value, backend_for(fault), faithful)
    return out


@dataclass(frozen=True)
class Verdict:
    """A check's outcome in a run: whether every item passed, and the failures' text."""

    passed: bool
    message: str
    failed_items: tuple[str, ...]


def verdicts(results: Path) -> dict[str, Verdict]:
    """By check name (``nan``, ``none``, ...): the verdict of the check's items in a results
    file. An item's failure text is its violations and its report (or error), node ids and
    faulty backends' names left out."""
    doc = json.loads(results.read_text())
    items: dict[str, list[dict[str, Any]]] = {}
    for item in doc["items"]:
        check = item["nodeid"].split("::")[1]  # kind(name)
        name = check[check.index("(") + 1 : -1]
        items.setdefault(name, []).append(item)
    out = {}
    for name, group in items.items():
        failed = [i for i in group if i["outcome"] in ("failed", "error")]
        message = "\n".join(
            "\n".join([*i.get("violations", []), i.get("longrepr") or ""]) for i in failed
        )
        # The fault is in the backend's name (faulty-nan): a message must name it itself.
        message = FAULTY_NAME.sub("<backend>", message)
        out[name] = Verdict(not failed, message, tuple(i["nodeid"] for i in failed))
    return out


def write_project(pytester: pytest.Pytester, models: str, backends: str, checks: str) -> None:
    """The run's folder: ini, conftest (the wrapping hook), suite (3 prompts) and matrix."""
    pytester.makefile(".ini", pytest=INI)
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n{models}backends:\n{backends}suites: [addition.jsonl]\n"
        f"settings: {{num_prompts: 3}}\nchecks:\n{checks}",
    )


def run_kind(
    pytester: pytest.Pytester,
    kind: str,
    models: str,
    backends: str,
    faithful: str,
    names: dict[Fault, str],
    *,
    subprocess: bool,
) -> dict[str, Verdict]:
    """One run of ``kind`` with a check per fault (``names``: the faulty backends) and the
    no-fault control on ``faithful``; for a golden replay, the golden is recorded from
    ``faithful`` first. The verdict of every check by its name."""
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    args = ["-q", "-p", "no:cacheprovider"]
    if kind == "golden":  # the golden recorded from the faithful backend first
        write_project(pytester, models, backends, check_entry(kind, CONTROL, faithful, faithful))
        recorded = run(*args, "--infercheck-record")
        assert recorded.ret == 0, recorded.stdout.str()
    write_project(
        pytester, models, backends, checks_block(kind, names, faithful, names.__getitem__)
    )
    run(*args, "--infercheck-results=results.json")
    return verdicts(pytester.path / "results.json")


def assert_expected(kind: str, fault: Fault, verdict: Verdict, *, top_k: bool) -> None:
    """The check of ``fault`` in ``kind``'s run against :data:`~tests.faults.EXPECTED`, on
    an engine that returns top-k logprobs (``top_k``) or not."""
    expected = expected_for(kind, fault, top_k)
    if expected == PASS:
        assert verdict.passed, f"{kind} cannot see {fault.name} but failed:\n{verdict.message}"
        return
    assert not verdict.passed, f"{kind} passed the fault {fault.name} silently"
    assert message_names(verdict.message, tuple(expected)), (
        f"{kind} failed on {fault.name} without naming it ({' + '.join(expected)}):\n"
        f"{verdict.message[:3000]}"
    )


class RunCache:
    """A module's runs, one per kind, made by the first test that needs one."""

    def __init__(self) -> None:
        self._verdicts: dict[str, dict[str, Verdict]] = {}

    def get(self, kind: str, run: Callable[[], dict[str, Verdict]]) -> dict[str, Verdict]:
        if kind not in self._verdicts:
            self._verdicts[kind] = run()
        return self._verdicts[kind]


def fault_cases(
    kinds: Iterable[str],
    faults: Iterable[Fault],
    pending: dict[tuple[str, Fault], str],
) -> list[Any]:
    """``(kind, fault)`` parameters; a pair in ``pending`` (a fail-closed rule the checks do
    not have yet) is a strict xfail, so the suite turns red when the rule lands."""
    faults = list(faults)
    out = []
    for kind in kinds:
        for fault in faults:
            reason = pending.get((kind, fault))
            marks = (
                [pytest.mark.xfail(strict=True, reason=f"fail-closed rule pending: {reason}")]
                if reason
                else []
            )
            out.append(pytest.param(kind, fault, marks=marks, id=f"{kind}-{fault.value}"))
    return out


__all__ = [
    "CONTROL",
    "GOLDEN",
    "RunCache",
    "Verdict",
    "assert_expected",
    "backend_name",
    "checks_block",
    "fault_cases",
    "mode_of",
    "verdicts",
    "write_project",
]
