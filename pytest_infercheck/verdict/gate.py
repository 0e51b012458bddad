"""Gates: a written threshold judged against the measure it declares it reads.

Every gate of every kind is a :class:`Gate` declared in the kind's spec facet, and every gate
is judged here (:func:`judge_gates`), so the rules hold for all kinds alike:

- a gate that is not written (its threshold ``None``, or a mode that turns it off) judges
  nothing;
- a written gate whose measure is :class:`~.measure.Unmeasured` for the item (or suite) fails
  it, naming the gate and why: ``max_kl: not measured: method text (the test side returned no
  top-k logprobs)``;
- a measure that is not finite fails its gate, whatever the limit: ``max_kl: mean KL is not
  finite (nan)``;
- otherwise ``max`` passes when ``value <= limit``, ``min`` when ``value >= limit``, ``true``
  when the measure is ``True`` (or a passing :class:`~.measure.Finding`).

A gate knows the key it is written under (``max_kl``, ``flips.max_rate``; the first part
is the key of the check entry, so a collection error can point at its line) and whether a
waiver may cover it (:mod:`.waiver`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .measure import Finding, MeasureValue, Unmeasured, number, qualifier

Op = Literal["max", "min", "true"]
Scope = Literal["item", "suite"]


@dataclass(frozen=True)
class Violation:
    """A reason an item or aggregate fails: its text, and the gate (its key) or the rule that
    found it (``outputs-differ``, ``request-failed``, ``fault``), which a waiver names."""

    text: str
    source: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Gate:
    """One threshold of a kind (see the module docstring).

    ``key``: where it is written (``max_kl``, ``flips.max_rate``); ``reads``: the measure it
    judges, or a function of the thresholds naming it (``flips.max_rate`` reads the Wilson
    upper bound or the point estimate as ``flips.gate`` says); ``op``: how; ``what``: the
    measure in words (``mean KL``); ``scope``: an item's evidence or an aggregate's summary;
    ``written``: whether the check writes it (default: its value is not None).
    """

    key: str
    reads: str | Callable[[Any], str]
    op: Op
    what: str
    scope: Scope = "item"
    written: Callable[[Any], bool] | None = None

    def limit(self, thresholds: Any) -> Any:
        """The written value at :attr:`key` (None when absent)."""
        value: Any = thresholds
        for part in self.key.split("."):
            value = getattr(value, part, None)
            if value is None:
                return None
        return value

    def is_written(self, thresholds: Any) -> bool:
        if self.written is not None:
            return self.written(thresholds)
        return self.limit(thresholds) is not None

    def measure_name(self, thresholds: Any) -> str:
        return self.reads if isinstance(self.reads, str) else self.reads(thresholds)

    def judge(self, thresholds: Any, measures: Mapping[str, MeasureValue]) -> Violation | None:
        """This gate's violation on ``measures``, or None (see the module docstring)."""
        if not self.is_written(thresholds):
            return None
        name = self.measure_name(thresholds)
        if name not in measures:
            return Violation(
                f"{self.key}: not measured: no {self.what} was recorded ({name})", self.key
            )
        value = measures[name]
        if isinstance(value, Unmeasured):
            return Violation(f"{self.key}: not measured: {value.reason}", self.key)
        limit = self.limit(thresholds)
        if self.op == "true":
            return self._judge_finding(value, limit)
        n = number(value)
        if n is None:
            raise TypeError(f"gate {self.key} reads a number, {name} is {value!r}")
        said = f"{self.what}{qualifier(value)}"
        if not math.isfinite(n):
            return Violation(f"{self.key}: {said} is not finite ({n}): fails", self.key)
        if self.op == "max" and n > limit:
            return Violation(f"{said} {n:.6g} > {self.key} {limit:g}", self.key)
        if self.op == "min" and n < limit:
            return Violation(f"{said} {n:.6g} < {self.key} {limit:g}", self.key)
        return None

    def _judge_finding(self, value: MeasureValue, limit: Any) -> Violation | None:
        ok = value.ok if isinstance(value, Finding) else value
        if ok is True:
            return None
        if ok is not False:
            raise TypeError(f"gate {self.key} reads a yes/no finding, got {value!r}")
        detail = f": {value.detail}" if isinstance(value, Finding) and value.detail else ""
        return Violation(f"{self.what}{detail} ({self.key}: {limit})", self.key)


def judge_gates(
    gates: Iterable[Gate], thresholds: Any, measures: Mapping[str, MeasureValue], scope: Scope
) -> list[Violation]:
    """The violations of every written gate of ``scope`` on ``measures``, in declaration
    order."""
    out = []
    for gate in gates:
        if gate.scope != scope:
            continue
        violation = gate.judge(thresholds, measures)
        if violation is not None:
            out.append(violation)
    return out


def written_gates(gates: Iterable[Gate], thresholds: Any) -> list[Gate]:
    """The gates a check writes."""
    return [g for g in gates if g.is_written(thresholds)]


def unmeasured(value: MeasureValue) -> bool:
    return isinstance(value, Unmeasured)
