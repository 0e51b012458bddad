"""request-conformance's summarize facet (pure): per probe, how many items conformed, failed
or were not sent; the framework fails the aggregate for every failed or errored item."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .records import ConformanceAggregate, ConformanceItem


def summarize(items: Sequence[RecordedItem], thresholds: Any, context: TargetContext) -> Summary:
    """The aggregate of the probes' records (see the module docstring)."""
    probes: dict[str, dict[str, int]] = {}
    for item in items:
        record = item.record
        if not isinstance(record, ConformanceItem):
            continue
        counts = probes.setdefault(record.probe, {"conforming": 0, "failed": 0, "not sent": 0})
        if item.violations:
            counts["failed"] += 1
        elif record.not_sent is not None or not record.answers:
            counts["not sent"] += 1
        else:
            counts["conforming"] += 1
    data = ConformanceAggregate(context.target, len(items), probes, context.engines)
    failed = sum(c["failed"] for c in probes.values())
    conforming = sum(c["conforming"] for c in probes.values())
    text = (
        f"{context.target}: {conforming} probe items conforming, {failed} failed, "
        f"{sum(c['not sent'] for c in probes.values())} not sent"
    )
    return Summary(data, [], text, [("infercheck_conforming", conforming)], {})
