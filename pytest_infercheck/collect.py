"""The matrix as pytest nodes, with stable readable ids.

``infercheck.yaml`` -> one collector per check (``compare(bf16-vs-q4)``, ``sweep(bf16)``) ->
one collector per suite (``reasoning``) -> one item per prompt (``r017``; in a sweep one per
prompt and model, ``r017[q4]``) plus ``aggregate`` (suite gates) and, for a sweep,
``self-check`` (the baseline run twice must be identical).

Brackets appear only at the end, as parameters: pytest reads ``[`` in a node id as the
start of an item's parameters (``--lf``, xdist and JUnit parse ids back from strings), so a
collector named ``compare[...]`` would not round-trip. Work is done by :mod:`.runs`;
this module only shapes the tree and the failure reports.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest.pathlib import bestrelpath

from .config import CheckSpec, LoadedMatrix, Target, load_matrix
from .options import effective_settings
from .suites import Suite, SuiteError, load_suite
from .yamlpos import SourceError

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

    from .checks.target import ItemPlan, Outcome, TargetRun
    from .runs import CheckRun


class InfercheckFailure(Exception):
    """A check failed; the message is the whole human-readable report."""


def _plain_failure(
    node: pytest.Item | pytest.Collector, excinfo: ExceptionInfo[BaseException]
) -> str | None:
    err = excinfo.value
    if isinstance(err, SourceError | SuiteError):
        path = bestrelpath(node.config.rootpath, Path(err.path))
        return f"{path}:{err.line}: {err.reason}" if err.line else f"{path}: {err.reason}"
    if isinstance(err, InfercheckFailure):
        return str(err)
    from .backends import BackendError

    if isinstance(excinfo.value, BackendError):
        return f"backend error: {excinfo.value}"
    return None


class InfercheckFile(pytest.File):
    """An ``infercheck*.yaml`` matrix."""

    def collect(self) -> Iterator[pytest.Collector]:
        loaded = load_matrix(self.path)
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
    """``compare(bf16-vs-q4)``, ``sweep(bf16)``, ``diff(bf16)``, ``determinism(q4)``; backends
    appear in a compare only where they tell the sides apart, in a single-target check only
    when the matrix has several (``stress(q4.llama)``)."""
    if check.name:
        return f"{check.kind}({check.name})"
    baseline = check.baseline_side(index)
    base = loaded.target(baseline.ref, baseline.loc)
    if not check.is_comparison:
        several = len(loaded.matrix.backends) > 1
        label = f"{base.model}.{base.backend}" if several else base.model
        return f"{check.kind}({label})"
    if check.compare is not None:
        (side,) = check.test_sides(index)
        test = loaded.target(side.ref, side.loc)
        return f"{check.kind}({_side(base, test)}-vs-{_side(test, base)})"
    return f"{check.kind}({base.model})"


def _side(target: Target, other: Target) -> str:
    if target.backend == other.backend:
        return target.model
    return target.model if target.model != other.model else f"{target.model}.{target.backend}"


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
        for ref in refs:
            suite = load_suite(ref.suite, self.loaded.base_dir)
            limits = [n for n in (ref.limit, self.settings.num_prompts) if n is not None]
            suite = suite.limited(min(limits)) if limits else suite
            yield SuiteCollector.from_parent(self, name=suite.name, suite=suite)

    def repr_failure(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        return _plain_failure(self, excinfo) or super().repr_failure(excinfo)


class SuiteCollector(pytest.Collector):
    """One suite within a check; owns the shared :class:`CheckRun`."""

    def __init__(self, *, suite: Suite, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.selected: set[str] = set()
        """Prompt ids (plan keys) of this suite's items selected to run (set after -k etc.)."""
        self._run: CheckRun | TargetRun | None = None

    @property
    def check_collector(self) -> CheckCollector:
        assert isinstance(self.parent, CheckCollector)
        return self.parent

    def run(self) -> CheckRun:
        """The comparison state shared by this suite's items (built on first use)."""
        run = self._shared_run()
        from .runs import CheckRun

        assert isinstance(run, CheckRun)
        return run

    def target_run(self) -> TargetRun:
        """The single-target check state shared by this suite's items."""
        run = self._shared_run()
        from .checks.target import TargetRun

        assert isinstance(run, TargetRun)
        return run

    def _shared_run(self) -> CheckRun | TargetRun:
        if self._run is None:
            from .state import engine_for

            parent = self.check_collector
            fields: dict[str, Any] = {
                "engine": engine_for(self.config),
                "loaded": parent.loaded,
                "check": parent.check,
                "index": parent.index,
                "suite": self.suite,
                "settings": parent.settings,
                "selected": frozenset(self.selected),
                "only_selected": self.config.getoption("infercheck_shard", None) is not None,
            }
            if parent.check.is_comparison:
                from .runs import CheckRun

                self._run = CheckRun(**fields)
            else:
                from .checks.target import run_class

                self._run = run_class(parent.check.kind)(**fields)
        return self._run

    def record(
        self, role: str, name: str, violations: list[str], data: dict[str, Any]
    ) -> dict[str, Any]:
        """The report record of one of this suite's items (see ``plugin``: it travels on the
        test report as ``report.infercheck``, across xdist, into the HTML and JSON reports)."""
        parent = self.check_collector
        return {
            "check": parent.name,
            "kind": parent.check.kind,
            "suite": self.suite.name,
            "role": role,
            "name": name,
            "thresholds": parent.thresholds,
            "violations": list(violations),
            "data": data,
        }

    def collect(self) -> Iterator[pytest.Item]:
        parent = self.check_collector
        if not parent.check.is_comparison:
            yield from self._collect_target_items()
            return
        sides = parent.check.test_sides(parent.index)
        if parent.check.self_check:
            yield SelfCheckItem.from_parent(self, name="self-check")
        for prompt in self.suite.prompts:
            for side in sides:
                if side.label is None:
                    yield PromptItem.from_parent(
                        self, name=prompt.id, prompt_id=prompt.id, test=side.ref
                    )
                else:
                    yield PromptItem.from_parent(
                        self,
                        name=f"{prompt.id}[{side.label}]",
                        nodeid=_param_id(self, prompt.id, side.label),
                        prompt_id=prompt.id,
                        test=side.ref,
                    )
        yield AggregateItem.from_parent(self, name="aggregate")

    def _collect_target_items(self) -> Iterator[pytest.Item]:
        from .checks.target import run_class

        check = self.check_collector.check
        for plan in run_class(check.kind).plan(check, self.suite):
            if plan.param is None:
                yield TargetItem.from_parent(self, name=plan.name, plan=plan)
            else:
                yield TargetItem.from_parent(
                    self,
                    name=f"{plan.name}[{plan.param}]",
                    nodeid=_param_id(self, plan.name, plan.param),
                    plan=plan,
                )
        yield TargetAggregateItem.from_parent(self, name="aggregate")


def _param_id(parent: pytest.Collector, name: str, param: str) -> Any:
    """The node id ``<parent>::name[param]`` with ``param`` as real parameters (pytest >= 9
    structures node ids; older versions build the same string from the name)."""
    node_id = getattr(parent, "id", None)
    return None if node_id is None else node_id.child(name).with_params(param)


class _InfercheckItem(pytest.Item):
    infercheck_record: dict[str, Any] | None = None
    """Set by ``runtest``: what the item measured (see :meth:`SuiteCollector.record`)."""
    infercheck_golden: list[Any] | None = None
    """Under ``--infercheck-record``: the golden entries this item recorded."""

    @property
    def suite_node(self) -> SuiteCollector:
        assert isinstance(self.parent, SuiteCollector)
        return self.parent

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.nodeid.split("::", 1)[-1]

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        return _plain_failure(self, excinfo) or super().repr_failure(excinfo, style=style)


class PromptItem(_InfercheckItem):
    """One prompt x comparison; per-item thresholds."""

    def __init__(self, *, prompt_id: str, test: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_id = prompt_id
        self.test_ref = test

    def runtest(self) -> None:
        from .checks.verdicts import failure_text

        run = self.suite_node.run()
        if run.recording:
            _recorded(self, run.record([self.prompt_id]))
            return
        result, violations = run.prompt_result(self.prompt_id, self.test_ref)
        self.user_properties.extend(run.item_properties(result))
        self.infercheck_record = self.suite_node.record(
            "prompt", self.name, violations, run.item_data(result)
        )
        if violations:
            raise InfercheckFailure(failure_text(result, violations))


class AggregateItem(_InfercheckItem):
    """Suite gates over every prompt of the check x suite (and, for a sweep, every model)."""

    def runtest(self) -> None:
        run = self.suite_node.run()
        if run.recording:
            _recorded(self, run.record([p.id for p in self.suite_node.suite.prompts]))
            return
        summary, violations, properties, data = run.aggregate()
        self.user_properties.extend(properties)
        self.infercheck_record = self.suite_node.record("aggregate", self.name, violations, data)
        if violations:
            raise InfercheckFailure(
                summary + "\nviolations:\n" + "\n".join(f"  - {v}" for v in violations)
            )


def _recorded(item: _InfercheckItem, recorded: tuple[dict[str, Any], list[Any]]) -> None:
    """An item under ``--infercheck-record``: role ``record``; its golden entries ride on its
    report to the controller, which writes the golden (see ``golden_writer``)."""
    data, payloads = recorded
    item.infercheck_record = item.suite_node.record("record", item.name, [], data)
    item.infercheck_golden = payloads


class SelfCheckItem(_InfercheckItem):
    """The sweep's baseline generated twice must be identical, token for token."""

    def runtest(self) -> None:
        problems = self.suite_node.run().self_check()
        self.user_properties.append(("infercheck_self_check_problems", len(problems)))
        self.infercheck_record = self.suite_node.record(
            "self-check", self.name, problems, {"problems": problems}
        )
        if problems:
            raise InfercheckFailure(
                "baseline self-check FAILED: the baseline is not deterministic, so no sweep "
                "level can be judged against it\n" + "\n".join(f"  - {p}" for p in problems)
            )


class TargetItem(_InfercheckItem):
    """One item of a single-target check (a prompt, a concurrency level, a hostile request)."""

    def __init__(self, *, plan: ItemPlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan

    def runtest(self) -> None:
        outcome = self.suite_node.target_run().run_item(self.plan)
        _finish(self, self.plan.role, outcome)


class TargetAggregateItem(_InfercheckItem):
    """The suite gates of a single-target check."""

    def runtest(self) -> None:
        outcome = self.suite_node.target_run().aggregate()
        _finish(self, "aggregate", outcome)


def _finish(item: _InfercheckItem, role: str, outcome: Outcome) -> None:
    item.user_properties.extend(outcome.properties)
    item.infercheck_record = item.suite_node.record(
        role, item.name, outcome.violations, outcome.data
    )
    if outcome.violations:
        head = f"{outcome.text}\n" if outcome.text else ""
        raise InfercheckFailure(
            head + "violations:\n" + "\n".join(f"  - {v}" for v in outcome.violations)
        )


def note_selected(items: list[pytest.Item]) -> None:
    """Tell each suite which of its prompts (or plan keys) will run, so HTTP prefetching
    skips the rest."""
    for item in items:
        if isinstance(item, PromptItem):
            item.suite_node.selected.add(item.prompt_id)
        elif isinstance(item, TargetItem):
            item.suite_node.selected.add(item.plan.key)
