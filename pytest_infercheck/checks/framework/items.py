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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...metrics.degenerate import DegenerateScan, DegenerateTotal, total_degenerate
from ...verdict.gate import judge_gates
from ...verdict.measure import MeasureValue
from .outcome import Outcome

if TYPE_CHECKING:
    from .kind import CheckKind

SHOWN_ITEMS = 5
"""Failed or errored items an aggregate names before ``... N more``."""


@dataclass(frozen=True)
class RecordedItem:
    """One item of a check x suite as its aggregate sees it: its role, its name in the node
    id (``r017[q4]``), its record (the kind's dataclass for that role, read back from its
    plain form, exactly as a results file holds it) and its violations."""

    role: str
    name: str
    record: Any
    """None when the item errored (:attr:`error`)."""
    error: str | None = None
    """Why the item produced no record (an engine error), else None."""
    degenerate: DegenerateScan | None = None
    """What its generations showed of degenerate output."""
    violations: tuple[str, ...] = ()
    """Why the item failed (empty: it passed)."""


def records_of(items: Sequence[RecordedItem], role: str) -> list[Any]:
    """The records of the items with ``role`` that produced one, in order."""
    return [item.record for item in items if item.role == role and item.record is not None]


def _named(items: Sequence[RecordedItem], say: Any) -> str:
    names = ", ".join(say(item) for item in items[:SHOWN_ITEMS])
    more = f", ... {len(items) - SHOWN_ITEMS} more" if len(items) > SHOWN_ITEMS else ""
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


@dataclass
class Summary:
    """What a kind's ``summarize`` facet makes of its items: the aggregate's record, the
    kind's own findings (``violations``), the measures its suite gates read, its text and its
    JUnit properties."""

    record: Any
    violations: list[str]
    text: str = ""
    properties: list[tuple[str, Any]] = field(default_factory=list)
    measures: dict[str, MeasureValue] = field(default_factory=dict)
    """What the kind's suite gates read (:mod:`~pytest_infercheck.verdict.gate`)."""
    column_measures: dict[str, dict[str, MeasureValue]] | None = None
    """What the suite gates read per column (a comparison's test side, a sweep's level),
    judged per column and named by it (``q4@local: mean KL 0.02 > max_mean_kl 0.01``);
    None: the gates read :attr:`measures`."""
    degenerate: DegenerateTotal | None = None
    """The items' degenerate findings counted (:func:`summarize_items`)."""

    def outcome(self) -> Outcome:
        return Outcome(
            self.violations, self.text, self.record, self.properties, degenerate=self.degenerate
        )


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
