"""The matrix as pytest nodes, with stable readable ids.

``infercheck.yaml`` -> one collector per check (``compare(bf16-vs-q4)``, ``sweep(bf16)``) ->
one collector per suite (``reasoning``) -> one item per prompt (``r017``; in a sweep one per
prompt and model, ``r017[q4]``) plus ``aggregate`` (suite gates) and, for a sweep,
``self-check`` (the baseline run twice must be identical).

Brackets appear only at the end, as parameters: pytest reads ``[`` in a node id as the
start of an item's parameters (``--lf``, xdist and JUnit parse ids back from strings), so a
collector named ``compare[...]`` would not round-trip. Every kind plans its items and does
its work (:mod:`.checks.framework`); this module only shapes the tree and the failure reports,
with two item classes for every kind: :class:`PlannedItem` and :class:`AggregateItem`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest.pathlib import bestrelpath

from . import context_ladder
from . import nodeid as node_ids
from .backends import BackendError
from .checks.framework.outcome import BACKEND_ERROR, Outcome, defer_gates
from .checks.framework.plan import ItemPlan
from .checks.framework.run import RunContext, SuiteRun
from .config import LoadedMatrix, check_rate_gates, load_matrix
from .options import effective_settings
from .records import ItemRecord, plain_data
from .stash import generation_cache_for
from .suites import Suite, SuiteError, load_suite
from .yamlpos import SourceError

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

    from .config import CheckSpec  # every kind's spec: imports them all


class InfercheckFailure(Exception):
    """A check failed; the message is the whole human-readable report."""


def _plain_failure(
    node: pytest.Item | pytest.Collector, excinfo: ExceptionInfo[BaseException]
) -> str | None:
    err = excinfo.value
    if isinstance(err, SourceError | SuiteError):
        errors = err.each() if isinstance(err, SourceError) else [err]
        path = bestrelpath(node.config.rootpath, Path(err.path))
        return "\n".join(
            f"{path}:{e.line}: {e.reason}" if e.line else f"{path}: {e.reason}" for e in errors
        )
    if isinstance(err, InfercheckFailure):
        return str(err)
    if isinstance(excinfo.value, BackendError):
        return f"{BACKEND_ERROR}{excinfo.value}"
    return None


class InfercheckFile(pytest.File):
    """An ``infercheck*.yaml`` matrix."""

    def collect(self) -> Iterator[pytest.Collector]:
        loaded = load_matrix(self.path, on_this_machine=True)
        settings = effective_settings(self.config, loaded.matrix.settings)
        seen: dict[str, int] = {}
        for index, check in enumerate(loaded.matrix.checks):
            name = check_name(loaded, check, index)
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name[:-1]}-{seen[name]})"
            yield CheckCollector.from_parent(
                self, name=name, loaded=loaded, check=check, index=index, settings=settings
            )

    def repr_failure(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        return _plain_failure(self, excinfo) or super().repr_failure(excinfo)


def check_name(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``kind(label)``: the check's ``name``, else its kind's label (``compare(bf16-vs-q4)``,
    ``sweep(bf16)``, ``determinism(q4)``, ``stress(q4.llama)``)."""
    label = check.name or check.check_kind.spec.label(loaded, check, index)
    return f"{check.kind}({label})"


class CheckCollector(pytest.Collector):
    """One entry of ``checks:``."""

    def __init__(
        self,
        *,
        loaded: LoadedMatrix,
        check: CheckSpec,
        index: int,
        settings: Any,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.loaded = loaded
        self.check = check
        self.index = index
        self.settings = settings

    @functools.cached_property
    def thresholds(self) -> dict[str, Any]:
        """What the check holds its items to, for their records (computed once per check)."""
        return self.check.thresholds()

    def collect(self) -> Iterator[pytest.Collector]:
        refs = self.check.suites or self.loaded.matrix.suites
        for j, ref in enumerate(refs):
            if ref.suite == context_ladder.NAME:
                where = ("checks", self.index, "suites") if self.check.suites else ("suites",)
                suite = self._ladder((*where, j))
            else:
                suite = load_suite(ref.suite, self.loaded.base_dir)
            limits = [n for n in (ref.limit, self.settings.num_prompts) if n is not None]
            suite = suite.limited(min(limits)) if limits else suite
            check_rate_gates(self.loaded, self.check, self.index, suite)
            yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)

    def _ladder(self, loc: tuple[str | int, ...]) -> Suite:
        """The ``context-ladder`` suite of the check's first model (baseline first) that has
        a local folder with a ``config.json``; an error at ``loc`` when none has."""
        sides = [self.check.baseline_side(self.index), *self.check.test_sides(self.index)]
        sources: list[str | None] = []
        for side in sides:
            target = self.loaded.target(side.ref, side.loc)
            if target.golden is None:
                spec = self.loaded.matrix.models[target.model]
                sources.append(None if spec.path is None else str(self.loaded.base_dir / spec.path))
        model_dir = context_ladder.ladder_model_dir(sources)
        if model_dir is None:
            raise self.loaded.source.error(
                loc,
                f"{context_ladder.NAME} is made from a model's config.json and tokenizer.json: "
                "give one of the check's models a local `path` folder that has them",
            )
        return context_ladder.ladder_suite(model_dir)

    def repr_failure(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        return _plain_failure(self, excinfo) or super().repr_failure(excinfo)


class SuiteCollector(pytest.Collector):
    """One suite within a check; owns the check run its items share."""

    def __init__(self, *, suite: Suite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self._run: SuiteRun | None = None

    @property
    def check_collector(self) -> CheckCollector:
        assert isinstance(self.parent, CheckCollector)
        return self.parent

    def run(self) -> SuiteRun:
        """The state shared by this suite's items (built on first use)."""
        if self._run is None:
            parent = self.check_collector
            context = RunContext(
                cache=generation_cache_for(self.config),
                loaded=parent.loaded,
                check=parent.check,
                index=parent.index,
                suite=self.suite,
                settings=parent.settings,
                selected=self.selected(),
                only_selected=self.config.getoption("infercheck_shard", None) is not None,
            )
            self._run = SuiteRun(parent.check.check_kind, context)
        return self._run

    def selected(self) -> frozenset[str]:
        """Plan keys of this suite's items that run in this session (after ``-k``, ``--lf``
        and sharding), so HTTP prefetching skips the rest."""
        return frozenset(
            item.plan.key
            for item in self.session.items
            if isinstance(item, PlannedItem) and item.parent is self
        )

    def record(
        self,
        role: str,
        name: str,
        violations: list[str],
        data: Any,
        gates_deferred_to: str | None = None,
        degenerate: Any = None,
    ) -> dict[str, Any]:
        """The :class:`~.records.ItemRecord` of one of this suite's items, as plain types (it
        travels on the test report as ``report.infercheck``, across xdist, into the HTML and
        JSON reports)."""
        parent = self.check_collector
        record = ItemRecord(
            check=parent.name,
            kind=parent.check.kind,
            suite=self.suite.name,
            role=role,
            name=name,
            thresholds=parent.thresholds,
            violations=list(violations),
            data=plain_data(data),
            gates_deferred_to=gates_deferred_to,
            degenerate=None if degenerate is None else plain_data(degenerate),
        )
        return record.to_plain()

    def collect(self) -> Iterator[pytest.Item]:
        check = self.check_collector.check
        for plan in check.check_kind.spec.plan(check, self.suite):
            if plan.param is None:
                yield PlannedItem.from_parent(self, name=plan.name, plan=plan)
            else:
                yield PlannedItem.from_parent(
                    self,
                    name=plan.full_name,
                    nodeid=_param_id(self, plan.name, plan.param),
                    plan=plan,
                )
        yield AggregateItem.from_parent(self, name="aggregate")


def _param_id(parent: pytest.Collector, name: str, param: str) -> Any:
    """The node id ``<parent>::name[param]`` with ``param`` as real parameters (pytest >= 9
    structures node ids; older versions build the same string from the name)."""
    node_id = getattr(parent, "id", None)
    return None if node_id is None else node_id.child(name).with_params(param)


class _InfercheckItem(pytest.Item):
    role = "aggregate"
    infercheck_record: dict[str, Any] | None = None
    """Set by ``runtest``: what the item measured (see :meth:`SuiteCollector.record`)."""
    infercheck_golden: list[Any] | None = None
    """Under ``--infercheck-record``: the golden entries this item recorded."""

    @property
    def suite_node(self) -> SuiteCollector:
        assert isinstance(self.parent, SuiteCollector)
        return self.parent

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, node_ids.in_file(self.nodeid)

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        return _plain_failure(self, excinfo) or super().repr_failure(excinfo, style=style)

    def infercheck_stub(self) -> dict[str, Any]:
        """The record of this item when it produced none (it errored or was skipped): its
        identity, no violations, empty data."""
        return self.suite_node.record(self.role, self.name, [], {})

    def outcome(self) -> Outcome:
        raise NotImplementedError

    def runtest(self) -> None:
        outcome = self.outcome()
        self.user_properties.extend(outcome.properties)
        role = outcome.role or self.role
        self.infercheck_record = self.suite_node.record(
            role,
            self.name,
            outcome.violations,
            outcome.data,
            outcome.gates_deferred_to,
            outcome.degenerate,
        )
        self.infercheck_golden = outcome.golden_entries
        if outcome.violations:
            raise InfercheckFailure(outcome.failure_report())


class PlannedItem(_InfercheckItem):
    """One item a kind planned (a prompt, a prompt x test side, a concurrency level, ...)."""

    def __init__(self, *, plan: ItemPlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.role = plan.role

    def outcome(self) -> Outcome:
        return self.suite_node.run().outcome_of(self.plan)


class AggregateItem(_InfercheckItem):
    """The suite gates of a check x suite. Under ``--infercheck-shard`` it covers the shard's
    items and defers its suite gates to the merge (``pytest-infercheck report``): a part of
    a suite cannot pass or fail a gate on the whole."""

    def outcome(self) -> Outcome:
        outcome = self.suite_node.run().aggregate()
        shard = self.config.getoption("infercheck_shard", None)
        if shard is None or outcome.role is not None:
            return outcome
        return defer_gates(outcome, "".join(str(shard).split()))


def is_aggregate(item: pytest.Item) -> bool:
    return isinstance(item, AggregateItem)
