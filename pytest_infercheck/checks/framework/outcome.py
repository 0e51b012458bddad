"""What an item or aggregate found, as every report takes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.degenerate import DegenerateScan, DegenerateTotal


@dataclass
class Outcome:
    """What an item found; plain types only (it crosses xdist and goes into JSON)."""

    violations: list[str] = field(default_factory=list)
    text: str = ""
    """The human-readable report shown above the violations when the item fails."""
    data: Any = field(default_factory=dict)
    """Everything measured, for the HTML report and the JSON results: the kind's record (a
    dataclass registered in the kind's ``records``), made plain by :mod:`...records`."""
    properties: list[tuple[str, Any]] = field(default_factory=list)
    """Scalar numbers for JUnit properties (``infercheck_*``)."""
    role: str | None = None
    """The record's role when it is not the plan's (``record`` under
    ``--infercheck-record``)."""
    golden_entries: list[Any] | None = None
    """Golden entries this item recorded (under ``--infercheck-record``), for the controller's
    golden writer."""
    gates_deferred_to: str | None = None
    """An aggregate under ``--infercheck-shard``: the shard (``1/2``) whose suite gates were
    deferred to the merge (:func:`defer_gates`)."""
    degenerate: DegenerateScan | DegenerateTotal | None = None
    """An item's scan of the generations it read for degenerate output (a kind that reads
    none: None); an aggregate's count of its items' findings."""

    def failure_report(self) -> str:
        """What a failed item shows: what failed first (its first violation, and how many
        more: the line pytest's short summary, ``-rf``, shows), then :attr:`text`, then
        every violation."""
        first = self.violations[0] if self.violations else "failed"
        more = f" (+{len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        head = f"{first}{more}\n\n" + (f"{self.text}\n" if self.text else "")
        return head + "violations:\n" + "\n".join(f"  - {v}" for v in self.violations)


BACKEND_ERROR = "backend error: "
"""How an item that an engine failed (``BackendError``) begins its report; a merge reads the
engine's message back from after it."""

DEFERRED = "suite gates deferred to `pytest-infercheck report` (shard {shard})"
"""What an aggregate of a shard says instead of judging its suite gates."""


def defer_gates(outcome: Outcome, shard: str) -> Outcome:
    """A shard's aggregate ``outcome`` with its suite gates deferred to the merge: its partial
    numbers kept, its violations dropped (they would judge a part of the suite), and the
    deferral said in its text, its record and a JUnit property."""
    note = DEFERRED.format(shard=shard)
    return Outcome(
        violations=[],
        text=f"{outcome.text}\n{note}" if outcome.text else note,
        data=outcome.data,
        properties=[*outcome.properties, ("infercheck_gates_deferred", shard)],
        gates_deferred_to=shard,
        degenerate=outcome.degenerate,
    )


def with_degenerate(outcome: Outcome, fail: bool) -> Outcome:
    """An item's ``outcome`` with its degenerate findings said: in its text, a JUnit property
    ``infercheck_degenerate`` (their count) and, when ``fail`` (``fail_on_degenerate:
    true``), one violation each, naming its pattern. Unchanged for a kind that reads no
    generation."""
    scan = outcome.degenerate
    if not isinstance(scan, DegenerateScan):
        return outcome
    outcome.properties.append(("infercheck_degenerate", len(scan.found)))
    if scan.found:
        lines = "\n".join(f"degenerate output: {d.text}" for d in scan.found)
        outcome.text = f"{outcome.text}\n{lines}" if outcome.text else lines
    if fail:
        outcome.violations.extend(scan.violations())
    return outcome
