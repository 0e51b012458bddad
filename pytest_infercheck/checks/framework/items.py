"""An aggregate's view of its items, and the framework's aggregate rules.

A kind's ``summarize`` facet makes the aggregate's record, its text and its kind-specific
findings from its items' records (a pure function: the live run and ``pytest-infercheck
report``, over the union of a sharded run's records, call the same one). The framework then
applies, for every kind alike (:func:`summarize_items`):

- the items that errored (no record: their engine failed) fail the aggregate, named;
- the items that failed (any violation) fail the aggregate, named with their first
  violation, so an aggregate never passes while its items fail;
- the kind's suite gates (:class:`~pytest_infercheck.verdict.gate.Gate` of scope ``suite``)
  judged on the summary's measures (or on each column's, named by it), a written gate whose
  measure is unmeasured failing;
- the items' degenerate findings counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...metrics.degenerate import total_degenerate
from ...verdict.gate import judge_gates
from .summary import RecordedItem as RecordedItem
from .summary import Summary as Summary

if TYPE_CHECKING:
    from .kind import CheckKind

SHOWN_ITEMS = 5
"""Failed or errored items an aggregate names before ``, and N more``."""


def records_of(items: Sequence[RecordedItem], role: str) -> list[Any]:
    """The records of the items with ``role`` that produced one, in order."""
    return [item.record for item in items if item.role == role and item.record is not None]


def _named(items: Sequence[RecordedItem], say: Any) -> str:
    names = ", ".join(say(item) for item in items[:SHOWN_ITEMS])
    more = f", and {len(items) - SHOWN_ITEMS} more" if len(items) > SHOWN_ITEMS else ""
    return names + more


def errored_items(items: Sequence[RecordedItem]) -> list[str]:
    """A suite violation naming the items that errored (none when none did), by name: an
    item with no record is never left out of a verdict silently."""
    failed = sorted((item for item in items if item.error is not None), key=lambda i: i.name)
    if not failed:
        return []
    names = _named(failed, lambda item: f"{item.name} ({item.error})")
    return [f"{len(failed)} of {len(items)} items errored: {names}"]


def failed_items(items: Sequence[RecordedItem]) -> list[str]:
    """A suite violation naming the items that failed (none when none did), by name, each
    with its first violation: ``3 of 20 items failed: r003 (mean KL 0.4 > max_kl 0.05), ...``
    (the same for any order of ``items``)."""
    failed = sorted(
        (item for item in items if item.error is None and item.violations), key=lambda i: i.name
    )
    if not failed:
        return []
    names = _named(failed, lambda item: f"{item.name} ({item.violations[0]})")
    return [f"{len(failed)} of {len(items)} items failed: {names}"]


def summarize_items(
    kind: CheckKind, items: Sequence[RecordedItem], thresholds: Any, context: Any
) -> Summary:
    """The aggregate of a check x suite: the kind's ``summarize`` facet, then the framework's
    rules (see the module docstring). The live run and ``pytest-infercheck report`` call it
    alike."""
    summary = kind.summarize(items, thresholds, context)
    if summary.column_measures is None:
        gates = [
            g.text for g in judge_gates(kind.spec.gates, thresholds, summary.measures, "suite")
        ]
    else:
        gates = [
            f"{column}: {g.text}"
            for column, measures in summary.column_measures.items()
            for g in judge_gates(kind.spec.gates, thresholds, measures, "suite")
        ]
    summary.violations = [
        *errored_items(items),
        *failed_items(items),
        *summary.violations,
        *gates,
    ]
    scans = [(item.name, item.degenerate) for item in items if item.degenerate is not None]
    if scans:
        total = total_degenerate(scans)
        summary.degenerate = total
        summary.text = f"{summary.text}\n{total.text}" if summary.text else total.text
        summary.properties.append(("infercheck_degenerate", total.found))
    return summary
