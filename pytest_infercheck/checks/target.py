"""The frame of the single-target checks (determinism, stress, batch-invariance,
stream-parity, endpoint-parity, cache-pollution): what their items are and what they return.

Each kind lives in its own module with a :class:`TargetRun` subclass. ``plan`` names the items
at collection time (cheap: no engine, no model); ``run_item`` and ``aggregate`` do the work and
return an :class:`Outcome` of plain types, which becomes the item's verdict, its JUnit
properties and its record in the reports and the JSON results.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..suite_run import SuiteRun

if TYPE_CHECKING:
    from ..backends import PromptInput
    from ..config import CheckSpec
    from ..engine import ResolvedTarget
    from ..suites import Prompt, Suite

RUN_CLASSES = {
    "determinism": "pytest_infercheck.checks.determinism:DeterminismRun",
    "stress": "pytest_infercheck.checks.stress:StressRun",
    "batch-invariance": "pytest_infercheck.checks.batch_invariance:BatchInvarianceRun",
    "stream-parity": "pytest_infercheck.checks.parity:StreamParityRun",
    "endpoint-parity": "pytest_infercheck.checks.parity:EndpointParityRun",
    "cache-pollution": "pytest_infercheck.checks.cache_pollution:CachePollutionRun",
}


def run_class(kind: str) -> type[TargetRun]:
    """The :class:`TargetRun` subclass of check kind ``kind`` (imported on demand)."""
    module, _, name = RUN_CLASSES[kind].partition(":")
    cls: type[TargetRun] = getattr(importlib.import_module(module), name)
    return cls


@dataclass(frozen=True)
class ItemPlan:
    """One item of a single-target check x suite, known at collection time.

    ``name`` is the item's name in the node id (``e01``, ``c8``, ``invalid-utf8``), ``param``
    an optional bracketed parameter (``e01[chat]``), ``role`` what the item is (``prompt``,
    ``level``, ``hostile``), ``key`` what it is about (a prompt id, a level, a hostile kind).
    """

    name: str
    role: str
    key: str
    param: str | None = None


@dataclass
class Outcome:
    """What an item found; plain types only (it crosses xdist and goes into JSON)."""

    violations: list[str] = field(default_factory=list)
    text: str = ""
    """The human-readable report shown above the violations when the item fails."""
    data: dict[str, Any] = field(default_factory=dict)
    """Everything measured, for the HTML report and the JSON results."""
    properties: list[tuple[str, Any]] = field(default_factory=list)
    """Scalar numbers for JUnit properties (``infercheck_*``)."""


@dataclass
class TargetRun(SuiteRun):
    """The work of one single-target check x suite, shared by its items (memoise on
    ``engine.memo`` keyed by :meth:`memo_key`, so the aggregate reuses what items computed)."""

    # -- collection time ---------------------------------------------------------------------
    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        """The items of this check x suite besides ``aggregate``; default: one per prompt."""
        return [ItemPlan(p.id, "prompt", p.id) for p in suite.prompts]

    # -- run time ----------------------------------------------------------------------------
    def run_item(self, plan: ItemPlan) -> Outcome:
        raise NotImplementedError

    def aggregate(self) -> Outcome:
        raise NotImplementedError

    # -- helpers for subclasses ----------------------------------------------------------------
    @property
    def target(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def memo_key(self, *parts: Any) -> tuple[Any, ...]:
        return (self.check.kind, self.loaded.path, self.index, self.suite.name, *parts)

    def render(self, prompt: Prompt) -> PromptInput:
        return self.engine.render(self.target, prompt, self.settings.thinking)


def summary_lines(kind: str, aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """Terminal summary lines of the aggregates of a single-target kind: the kind's module
    provides ``summary_lines(aggregates)``; ``aggregates`` are (node id, passed, data)."""
    module = importlib.import_module(RUN_CLASSES[kind].partition(":")[0])
    render = getattr(module, "summary_lines", None)
    return list(render(aggregates)) if render is not None else []
