"""The framework's run of one check x suite: gather every item's evidence, then judge each
purely, then apply the verdict rules that hold for every kind.

An item's outcome (:meth:`SuiteRun.outcome_of`) is, in order:

1. the evidence of every item this process runs, gathered at once by the kind's gather
   facet (all the I/O; HTTP backends get every request concurrently);
2. the kind's judge on the item's evidence and the thresholds (pure): its record, its own
   findings and waivers;
3. the framework's rules: every failed request, late ``not exercised``, unprobed
   ``unsupported`` and reference not shown cold (:mod:`~pytest_infercheck.verdict.conduct`),
   every written gate of scope ``item`` on the evidence's measures, an unmeasured one failing
   (:mod:`~pytest_infercheck.verdict.gate`), and the waivers applied only to what was judged
   (:mod:`~pytest_infercheck.verdict.waiver`);
4. degenerate findings said (and failing under ``fail_on_degenerate: true``).

The aggregate is :func:`~.items.summarize_items` of the items' records and violations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError
from ...metrics.degenerate import DegenerateScan, DegenerateTotal
from ...records import load_record, plain_data
from ...verdict.conduct import conduct_notes, conduct_violations
from ...verdict.gate import judge_gates
from ...verdict.waiver import apply_waivers
from .context import RunContext as RunContext
from .items import RecordedItem, summarize_items
from .outcome import Outcome, with_degenerate

if TYPE_CHECKING:
    from .kind import CheckKind, Judged
    from .plan import ItemPlan


def item_outcome(kind: CheckKind, judged: Judged, evidence: Any, thresholds: Any) -> Outcome:
    """An item's outcome from the kind's judgement of its evidence, under the framework's
    rules (steps 3 of the module docstring; degenerate findings are added by the run)."""
    violations = [
        *conduct_violations(evidence.conduct),
        *judged.violations,
        *(
            judge_gates(kind.spec.gates, thresholds, evidence.measures, "item")
            if judged.gated
            else []
        ),
    ]
    kept, notes = apply_waivers(violations, judged.waivers)
    notes += conduct_notes(evidence.conduct)
    text = judged.text if judged.text is not None else kind.present.describe(judged.record)
    if notes:
        text = "\n".join([text, *notes]) if text else "\n".join(notes)
    return Outcome(
        [v.text for v in kept],
        text,
        judged.record,
        kind.present.properties(judged.record),
        role=judged.role,
        golden_entries=judged.golden_entries,
        degenerate=judged.degenerate,
    )


@dataclass
class SuiteRun:
    """The work of one check x suite in one process, shared by its items and its aggregate:
    the kind's gatherer, the evidence it gathered and each item's outcome, memoised."""

    kind: CheckKind
    context: RunContext
    _gatherer: Any = field(default=None, init=False, repr=False)
    _evidence: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _outcomes: dict[str, Outcome] = field(default_factory=dict, init=False, repr=False)

    @property
    def gatherer(self) -> Any:
        if self._gatherer is None:
            self._gatherer = self.kind.gather(self.context)
        return self._gatherer

    def plans(self) -> list[ItemPlan]:
        return self.kind.spec.plan(self.context.check, self.context.suite)

    def evidence(self, plan: ItemPlan) -> Any:
        """``plan``'s evidence (a ``BackendError`` when its target failed outright); the
        first call gathers every item this process runs, at once (a kind whose items spread
        over xdist workers, each its own scope, gathers each item when it is asked for:
        another worker may be running the others)."""
        if plan.full_name not in self._evidence:
            ctx = self.context
            todo = [plan]
            if not self.kind.spec.spread_over_workers:
                todo += [
                    p
                    for p in self.plans()
                    if p.full_name not in self._evidence
                    and p.full_name != plan.full_name
                    and ctx.wanted(p.key)
                    and ctx.in_scope(p.key)
                ]
            self._gather(todo)
        return self._evidence[plan.full_name]

    def _gather(self, plans: list[ItemPlan]) -> None:
        try:
            got: Mapping[str, Any] = self.gatherer.gather(plans)
        except BackendError as exc:
            got = {}
            for plan in plans:
                self._evidence[plan.full_name] = exc
        for plan in plans:
            if plan.full_name in self._evidence:
                continue
            self._evidence[plan.full_name] = got.get(
                plan.full_name, BackendError(f"{plan.full_name}: no evidence was gathered")
            )

    def outcome_of(self, plan: ItemPlan) -> Outcome:
        """The item's outcome (see the module docstring), memoised: the item and the
        aggregate share it. Raises ``BackendError`` when its target failed outright."""
        if plan.full_name not in self._outcomes:
            evidence = self.evidence(plan)
            if isinstance(evidence, BackendError):
                raise evidence
            thresholds = self.context.thresholds
            judged = self.kind.judge(plan, evidence, thresholds)
            outcome = item_outcome(self.kind, judged, evidence, thresholds)
            fail = self.context.settings.fail_on_degenerate
            self._outcomes[plan.full_name] = with_degenerate(outcome, fail)
        return self._outcomes[plan.full_name]

    def recorded_items(self) -> list[RecordedItem]:
        """The items the aggregate covers (every planned item, or under
        ``--infercheck-shard`` the shard's selected ones), each with its record read back
        from its plain form and its violations: what a results file holds of them. An item
        whose engine failed (``BackendError``) is there with its error and no record."""
        records = self.kind.spec.records
        items = []
        for plan in self.plans():
            if not self.context.in_scope(plan.key):
                continue
            try:
                outcome = self.outcome_of(plan)
            except BackendError as exc:
                items.append(RecordedItem(plan.role, plan.full_name, None, str(exc)))
                continue
            role = outcome.role or plan.role
            record: Any = load_record(records[role], plain_data(outcome.data))
            items.append(
                RecordedItem(
                    role,
                    plan.full_name,
                    record,
                    degenerate=_scan(outcome.degenerate),
                    violations=tuple(outcome.violations),
                )
            )
        return items

    def aggregate(self) -> Outcome:
        """The aggregate: :func:`~.items.summarize_items` of :meth:`recorded_items`; a
        gatherer with an ``aggregate(judged)`` method wraps it (a golden recording replaces
        it, an ungated check warns)."""

        def judged() -> Outcome:
            items = self.recorded_items()
            context = self.gatherer.context()
            return summarize_items(self.kind, items, self.context.thresholds, context).outcome()

        around = getattr(self.gatherer, "aggregate", None)
        return around(judged) if around is not None else judged()


def _scan(scan: DegenerateScan | DegenerateTotal | None) -> DegenerateScan | None:
    """An item's scan as a results file holds it (read back from its plain form)."""
    if not isinstance(scan, DegenerateScan):
        return None
    return load_record(DegenerateScan, plain_data(scan))
