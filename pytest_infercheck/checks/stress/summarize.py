"""The ``stress`` summarize facet: the levels' records to the aggregate (pure; the live run
and ``pytest-infercheck report`` over shards call it alike).

The aggregate is every level, in level order, whichever process measured it, each with its
item's verdict (the violations its item recorded); the framework names the levels that
failed or errored. Its properties count the failed levels and the divergence labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...metrics.ties import count_labels
from ...render.text import counted
from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .present import level_table
from .records import StressAggregate, StressLevel
from .spec import StressThresholds


def summarize(
    items: Sequence[RecordedItem], thresholds: StressThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the levels' records (see the module docstring)."""
    levels: list[StressLevel] = sorted(
        (
            dataclasses.replace(item.record, violations=list(item.violations))
            for item in items
            if item.role == "level" and item.record is not None
        ),
        key=lambda d: d.level,
    )
    record = StressAggregate(
        target=context.target,
        levels=levels,
        engines=context.engines,
        divergence_labels={
            label: sum(d.divergence_labels.get(label, 0) for d in levels)
            for label in count_labels([])
        },
    )
    return Summary(
        record=record,
        violations=[],
        text="\n".join([*level_table(levels), f"divergences {counted(record.divergence_labels)}"]),
        properties=[
            ("infercheck_levels_failed", sum(bool(d.violations) for d in levels)),
            ("infercheck_measured_by", ",".join(sorted({d.measured_by for d in levels}))),
            *(
                (f"infercheck_divergences_{label.replace('-', '_')}", n)
                for label, n in record.divergence_labels.items()
            ),
        ],
    )
