"""One run of a kind on the fake engines, through the framework's public path: a matrix
written from the kind's :class:`~pytest_infercheck.checks.framework.kind.HarnessProfile`,
loaded as the plugin loads it, a real :class:`~pytest_infercheck.generation_cache.
GenerationCache` whose backends are the fake engine (``create_backend`` patched), and
``SuiteRun(kind, RunContext(...))``: every item's ``outcome_of`` and the ``aggregate()``.

The matrix has one model (``toy``) and two backends of the profile's shape, both served by
the fake engine: ``ref`` (``{reference}``) and ``sut`` (``{target}``, the target under test);
a fault may hit either (the fault space aims at any request the faithful run made).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from pytest_infercheck.backends import Backend, BackendError
from pytest_infercheck.checks.framework.harness import HarnessProfile
from pytest_infercheck.checks.framework.kind import CheckKind
from pytest_infercheck.checks.framework.outcome import BACKEND_ERROR, Outcome
from pytest_infercheck.checks.framework.run import RunContext, SuiteRun
from pytest_infercheck.config import LoadedMatrix, load_matrix
from pytest_infercheck.generation_cache import GenerationCache
from pytest_infercheck.records import ItemRecord, plain_data
from pytest_infercheck.suites import Suite, load_suite

from .engine import SHAPES, Injector
from .faults import Fault, Request

MODEL = "toy"
REFERENCE, TARGET = "ref", "sut"
SUITE_NAME = "harness"

DEFAULT_SUITE: tuple[Mapping[str, Any], ...] = (
    {"id": "p1", "prompt": "12+34=", "answer": "46", "answer_kind": "number", "max_tokens": 8},
    {"id": "p2", "prompt": "Name a colour:", "max_tokens": 10},
    {"id": "p3", "prompt": "40+35=", "answer": "75", "answer_kind": "number", "max_tokens": 8},
)
"""Two sums (answers the toy gets right) and a prompt answered with a word."""


def placeholders() -> dict[str, str]:
    return {
        "target": f"{MODEL}@{TARGET}",
        "reference": f"{MODEL}@{REFERENCE}",
        "model": MODEL,
        "backend": TARGET,
        "reference_backend": REFERENCE,
    }


def filled(value: Any) -> Any:
    """``value`` (a profile's entry) with the placeholders of its strings filled in."""
    if isinstance(value, str):
        return value.format(**placeholders())
    if isinstance(value, Mapping):
        return {k: filled(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [filled(v) for v in value]
    return value


def matrix_text(profile: HarnessProfile, shape: str) -> str:
    """The matrix of one kind's profile on the fake engine of ``shape``."""
    model: dict[str, Any] = {"gguf": "./toy.gguf", "served_name": "toy"}
    chat = {"chat": True} if shape == "llama-server" else {}
    backends = {
        name: {"kind": shape, "url": f"http://127.0.0.1:{port}", **chat, **profile.backend}
        for name, port in ((REFERENCE, 9), (TARGET, 10))
    }
    doc = {
        "models": {MODEL: model},
        "backends": backends,
        "suites": [f"./{SUITE_NAME}.jsonl"],
        "settings": dict(profile.settings),
        "checks": [filled(profile.entry_on(shape))],
    }
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class Setup:
    """A kind's matrix, loaded: what every run of the kind on one shape shares."""

    kind: CheckKind
    profile: HarnessProfile
    shape: str
    loaded: LoadedMatrix
    suite: Suite

    @property
    def check(self) -> Any:
        return self.loaded.matrix.checks[0]

    @property
    def label(self) -> str:
        return f"{self.kind.name}({self.kind.spec.label(self.loaded, self.check, 0)})"


@cache
def _folder() -> Path:
    """A folder for the matrices of this process, removed when it exits."""
    folder = Path(tempfile.mkdtemp(prefix="infercheck-harness-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def setup(kind: CheckKind, profile: HarnessProfile, shape: str) -> Setup:
    """The kind's matrix written and loaded as the plugin loads it (a configuration error is
    raised as it would be at collection)."""
    folder = _folder() / f"{kind.name}-{shape}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = profile.suite or DEFAULT_SUITE
    (folder / f"{SUITE_NAME}.jsonl").write_text("\n".join(json.dumps(dict(x)) for x in lines))
    path = folder / "infercheck.yaml"
    path.write_text(matrix_text(profile, shape))
    loaded = load_matrix(path)
    check = loaded.matrix.checks[0]
    refs = check.suites or loaded.matrix.suites
    suite = load_suite(refs[0].suite, loaded.base_dir)
    return Setup(kind, profile, shape, loaded, suite)


@dataclass
class ItemResult:
    """What one item came to: its outcome, or the engine error it raised."""

    role: str
    name: str
    outcome: Outcome | None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or bool(self.outcome and self.outcome.violations)

    def words(self) -> str:
        """Everything the item says: its error, its violations, its text and its record."""
        if self.outcome is None:
            return self.error or ""
        o = self.outcome
        return "\n".join([*o.violations, o.text, json.dumps(plain_data(o.data), default=str)])


@dataclass
class RunResult:
    """A run of a kind: its items, its aggregate, the engine's log and what the fault did."""

    setup: Setup
    fault: Fault | None
    items: list[ItemResult]
    aggregate: ItemResult
    log: list[Request]
    applied: list[str]
    changed: list[Request]
    """The requests whose answers the fault changed."""
    thresholds: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.aggregate.failed or any(i.failed for i in self.items)

    def said(self) -> tuple[str, ...]:
        """Everything the items and the aggregate say (to tell whether a fault changed it)."""
        return tuple(i.words() for i in [*self.items, self.aggregate])

    def crashes(self) -> list[str]:
        """The items (and aggregate) that crashed instead of giving a verdict."""
        return [
            f"{i.name}: {i.error}"
            for i in [*self.items, self.aggregate]
            if i.error is not None and i.error.startswith(CRASH)
        ]

    def failures(self) -> list[str]:
        """What failed, one line each (for a failing invariant's message)."""
        out = []
        for item in [*self.items, self.aggregate]:
            if item.error is not None:
                out.append(f"{item.name}: error: {item.error}")
            elif item.outcome is not None and item.outcome.violations:
                out += [f"{item.name}: {v}" for v in item.outcome.violations]
        return out

    def nodeid(self, name: str) -> str:
        return f"infercheck.yaml::{self.setup.label}::{SUITE_NAME}::{name}"

    def plain_items(self) -> list[dict[str, Any]]:
        """The items as a results file holds them (the aggregate not among them)."""
        return [self.plain(item) for item in self.items]

    def plain(self, item: ItemResult, **more: Any) -> dict[str, Any]:
        o = item.outcome
        record = ItemRecord(
            check=self.setup.label,
            kind=self.setup.kind.name,
            suite=SUITE_NAME,
            role=item.role,
            name=item.name,
            thresholds=self.thresholds,
            violations=[] if o is None else list(o.violations),
            data={} if o is None else plain_data(o.data),
            degenerate=None if o is None or o.degenerate is None else plain_data(o.degenerate),
        ).to_plain()
        outcome = "failed" if item.failed else "passed"
        longrepr = (
            f"{BACKEND_ERROR}{item.error}"
            if item.error is not None
            else ("\n".join(o.violations) if o is not None and o.violations else None)
        )
        return {
            **record,
            "nodeid": self.nodeid(item.name),
            "outcome": outcome,
            "duration_s": 0.0,
            "worker": None,
            "longrepr": longrepr,
            **more,
        }


def run(s: Setup, fault: Fault | None = None, seed: int = 0) -> RunResult:
    """Every item of ``s``'s check x suite and its aggregate on the fake engines, ``fault``
    injected (None: faithful)."""
    injector = Injector(fault)
    engine = SHAPES[s.shape]

    def create(
        name: str, spec: Any, source: str, revision: str | None, url: str | None = None
    ) -> Backend:
        return engine(name, injector, seed=seed, chat=bool(getattr(spec, "chat", False)))

    cache = GenerationCache()
    try:
        with mock.patch("pytest_infercheck.engines.create_backend", create):
            context = RunContext(cache, s.loaded, s.check, 0, s.suite, s.loaded.matrix.settings)
            suite_run = SuiteRun(s.kind, context)
            items = []
            for plan in suite_run.plans():
                try:
                    outcome = suite_run.outcome_of(plan)
                except BackendError as exc:
                    items.append(ItemResult(plan.role, plan.full_name, None, str(exc)))
                    continue
                except Exception as exc:  # a crash: no verdict, but no pass either
                    items.append(ItemResult(plan.role, plan.full_name, None, _crash(exc)))
                    continue
                items.append(ItemResult(outcome.role or plan.role, plan.full_name, outcome))
            try:
                aggregate = ItemResult("aggregate", "aggregate", suite_run.aggregate())
            except BackendError as exc:
                aggregate = ItemResult("aggregate", "aggregate", None, str(exc))
            except Exception as exc:
                aggregate = ItemResult("aggregate", "aggregate", None, _crash(exc))
    finally:
        cache.close()
    return RunResult(
        s,
        fault,
        items,
        aggregate,
        injector.log,
        injector.applied,
        injector.changed_requests,
        s.check.thresholds(),
    )


CRASH = "crash: "


def _crash(exc: Exception) -> str:
    """An exception other than a ``BackendError`` out of the framework: the item errors (in
    pytest too), with no verdict of its own."""
    return f"{CRASH}{type(exc).__name__}: {exc}"
