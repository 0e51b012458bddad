"""The bridge for kinds not yet split into facets: a kind written as one ``CheckRun`` class
(:mod:`..protocol`) served through the framework's :class:`~.kind.CheckKind`.

Its gather facet is the old run's ``run_item`` (I/O and judging together, which is why this
module is temporary), its judge passes the old outcome through, so the framework's aggregate
rules (failed and errored items) and the reports see it like any kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ...backends.base import BackendError
from ...metrics.degenerate import DegenerateScan
from ...verdict.conduct import Conduct
from ...verdict.gate import Violation
from ...verdict.measure import MeasureValue
from .kind import CheckKind, Judged, PresentFacet, SpecFacet
from .outcome import Outcome
from .plan import ItemPlan

if TYPE_CHECKING:
    from ..protocol import LegacyKind
    from .context import RunContext


@dataclass
class LegacyEvidence:
    """An old run's outcome of an item, carried as evidence."""

    outcome: Outcome
    measures: Mapping[str, MeasureValue] = field(default_factory=dict)
    conduct: Conduct = field(default_factory=Conduct)


def _judge(plan: ItemPlan, evidence: LegacyEvidence, thresholds: Any) -> Judged:
    outcome = evidence.outcome
    scan = outcome.degenerate if isinstance(outcome.degenerate, DegenerateScan) else None
    return Judged(
        outcome.data,
        [Violation(v, "legacy") for v in outcome.violations],
        degenerate=scan,
        role=outcome.role,
        golden_entries=outcome.golden_entries,
        text=outcome.text,
    )


_ADAPTED: dict[int, CheckKind] = {}


def adapt(old: LegacyKind) -> CheckKind:
    """``old`` as a :class:`~.kind.CheckKind` (one per old kind object)."""
    if id(old) in _ADAPTED and _ADAPTED[id(old)].name == old.name:
        return _ADAPTED[id(old)]
    properties: dict[int, list[tuple[str, Any]]] = {}

    class Gather:
        def __init__(self, run: RunContext) -> None:
            # The legacy protocol is typed with config's classes, whose objects the run's
            # context holds (as the Protocols of ..matrix they satisfy).
            self.old = old.run(
                cache=run.cache,
                loaded=cast(Any, run.loaded),
                check=cast(Any, run.check),
                index=run.index,
                suite=run.suite,
                settings=run.settings,
                selected=run.selected,
                only_selected=run.only_selected,
            )

        def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
            if not getattr(self.old, "recording", False):  # a golden recording prefetches nothing
                self.old.prepare(list(plans))
            out: dict[str, Any] = {}
            for plan in plans:
                try:
                    outcome = self.old.run_item(plan)
                except BackendError as exc:
                    out[plan.full_name] = exc
                    continue
                properties[id(outcome.data)] = outcome.properties
                out[plan.full_name] = LegacyEvidence(outcome)
            return out

        def context(self) -> Any:
            return self.old.context()

        def aggregate(self, judged: Callable[[], Outcome]) -> Outcome:
            self.old.framework_aggregate = judged
            return self.old.aggregate()

    kind = CheckKind(
        name=old.name,
        spec=SpecFacet(
            options=old.spec,
            thresholds=old.thresholds,
            gates=(),
            label=cast(Any, old.label),
            context=old.context,
            records=old.records,
            plan=cast(Any, old.run.plan),
            rate_gates=cast(Any, old.rate_gates),
            spread_over_workers=old.spread_over_workers,
        ),
        gather=Gather,
        judge=_judge,
        summarize=old.summarize,
        present=PresentFacet(
            family=old.family,
            properties=lambda record: properties.get(id(record), []),
            summary_lines=old.summary_lines,
            views=old.views,
            measures=old.measures,
            other_measures=old.other_measures,
            columns=old.columns,
            charts=old.charts,
            bars=old.bars,
            distribution=old.distribution,
            verdicts=old.verdicts,
            headline=old.headline,
        ),
    )
    _ADAPTED[id(old)] = kind
    return kind
