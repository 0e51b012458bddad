"""What an aggregate is made from and of: its items as recorded (:class:`RecordedItem`) and a
kind's summary of them (:class:`Summary`). Plain data, below the kind (:mod:`.kind`) and the
aggregate's rules (:mod:`.items`), which both use them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.degenerate import DegenerateScan, DegenerateTotal
from ...verdict.measure import MeasureValue
from .outcome import Outcome


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
