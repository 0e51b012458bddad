"""Degenerate output: a generation that loops or stutters, found in the generation alone.

A counted finding, not a fault (:mod:`.consistency`): random-weight test models loop by
themselves, so a finding fails its item only where the user asks (``fail_on_degenerate:
true`` in the matrix's ``settings:``). Every generation of every kind is scanned, through
:func:`.consistency.read_generation`, so "faster and wrong" shows even where no baseline is
compared.

**Units.** A generation's token ids when it has them (the end-of-sequence token a
generation stopped on, ``finish_reason == "stop"``, left out); else its text, read twice:
as words (``\\s*\\S+``: each word with the blank before it, as tokens carry it) and as
characters; the first that shows a pattern is reported.

**Tail loop** (``loop``). For each period ``p`` in ``1 .. MAX_PERIOD`` (8), the longest
suffix of the units where ``u[i] == u[i - p]`` for every ``i`` in it, plus the ``p`` units it
repeats: ``covered`` units from ``start = n - covered`` to the end. The period covering the
most units is reported (ties: the shortest). A loop is degenerate when

* it covers at least ``MIN_LOOP`` (16) units **and** at least ``MIN_REPEATS`` (4) whole
  periods, and
* the generation did not end by itself: ``finish_reason`` is not ``stop`` (``length``: it
  ran into ``max_tokens`` still looping; an unknown reason counts as not stopped).

So ``"the the the ..."`` to ``max_tokens`` is a loop; a natural answer that repeats a little
and stops (``"1 1 1"``, ``"100000"``, a row of twenty ``-`` closing a table) is not: it is
short, or it stopped.

**Stutter** (``stutter``): every other unit duplicated, ``t0 t0 t1 t1 t2 t2 ...`` (the FP8
KV-cache bug: every second token repeated at confident logprobs). The longest run of
back-to-back pairs ``(u[i], u[i+1])`` with ``u[i] == u[i+1]``, ``i`` stepping by 2 (from an
even or an odd start). Degenerate when the run has at least ``MIN_STUTTER_PAIRS`` (8) pairs
(16 units) holding at least ``MIN_STUTTER_UNITS`` (3) distinct units (``a a a a ...`` is a
loop of period 1, ``0 0 1 1 0 0 1 1 ...`` a loop of period 4, not stutters). No
``finish_reason`` condition: a stutter is wrong wherever it stops.

When both patterns are present the loop is reported. A generation with no units (empty) has
no finding; the empty-generation rule of :mod:`.consistency` is where emptiness is judged.

Pure: plain values in, frozen dataclasses out.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends.base import Generation

__all__ = [
    "LOOP",
    "MAX_PERIOD",
    "MIN_LOOP",
    "MIN_REPEATS",
    "MIN_STUTTER_PAIRS",
    "MIN_STUTTER_UNITS",
    "STUTTER",
    "Degenerate",
    "DegenerateScan",
    "DegenerateTotal",
    "find_degenerate",
    "generation_degenerate",
    "total_degenerate",
]

MAX_PERIOD = 8
"""The longest n-gram a tail loop repeats."""
MIN_LOOP = 16
"""Units a tail loop covers at least."""
MIN_REPEATS = 4
"""Whole periods a tail loop covers at least."""
MIN_STUTTER_PAIRS = 8
"""Back-to-back duplicated pairs a stutter has at least."""
MIN_STUTTER_UNITS = 3
"""Distinct units a stutter's pairs hold at least."""

LOOP = "loop"
STUTTER = "stutter"

_SHOWN = 40  # characters of the repeated text quoted in a description
_WORD = re.compile(r"\s*\S+")


@dataclass(frozen=True)
class Degenerate:
    """One generation's degenerate stretch (see the module docstring)."""

    pattern: str
    """``loop`` or ``stutter``."""
    where: str
    """Which output (``run 3``, ``the test output``)."""
    period: int
    """A loop's n-gram length; 2 for a stutter (each unit twice)."""
    start: int
    """The first unit of the stretch."""
    covered: int
    """Units in the stretch (a loop runs to the end: ``start + covered == total``)."""
    total: int
    """Units of the generation."""
    unit: str
    """``token``, ``word`` or ``character``."""
    repeated: str
    """The raw text of one period (a loop) or of the first four duplicated units (a stutter),
    as the model produced it: untrusted, escaped wherever shown."""
    text: str
    """The finding as reported, the repeated text escaped: ``loop of period 1 (' the') in run
    3: 40 of 64 tokens from token 24 to the end``."""

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class DegenerateScan:
    """What an item's generations showed: how many it scanned and its findings. An item's
    record of it (:attr:`..checks.framework.outcome.Outcome.degenerate`)."""

    generations: int = 0
    found: list[Degenerate] = field(default_factory=list)

    @classmethod
    def of(cls, findings: Sequence[Degenerate | None]) -> DegenerateScan:
        """The scan of generations whose findings (None: none) are ``findings``."""
        return cls(len(findings), [f for f in findings if f is not None])

    @classmethod
    def merged(cls, scans: Sequence[DegenerateScan]) -> DegenerateScan:
        """One scan of the generations of ``scans``: their counts summed, findings in order."""
        return cls(sum(s.generations for s in scans), [f for s in scans for f in s.found])

    def violations(self) -> list[str]:
        """Each finding as a violation of its item (``fail_on_degenerate: true``)."""
        return [f"degenerate output: {d.text}" for d in self.found]


@dataclass(frozen=True)
class DegenerateTotal:
    """The findings of a check x suite's items, counted: a pure function of their scans
    (:func:`total_degenerate`)."""

    generations: int
    found: int
    by_pattern: dict[str, int]
    items: list[str]
    """``item: finding`` of the first findings (at most five), in item order."""

    @property
    def text(self) -> str:
        """``degenerate: 3 of 40 generations (loop 2, stutter 1): r003: loop of ...``."""
        if not self.found:
            return f"degenerate: 0 of {self.generations} generations"
        patterns = ", ".join(f"{p} {n}" for p, n in sorted(self.by_pattern.items()))
        more = ", ..." if self.found > len(self.items) else ""
        listed = "; ".join(self.items)
        return (
            f"degenerate: {self.found} of {self.generations} generations ({patterns}): "
            f"{listed}{more}"
        )


def total_degenerate(
    scans: Sequence[tuple[str, DegenerateScan]], *, shown: int = 5
) -> DegenerateTotal:
    """The findings of ``(item name, its scan)`` counted: generations scanned and findings
    summed (a generation two items read, a comparison's baseline against two test sides,
    counts in each), findings by pattern, the first ``shown`` named."""
    by_pattern: dict[str, int] = {}
    items: list[str] = []
    for name, scan in scans:
        for found in scan.found:
            by_pattern[found.pattern] = by_pattern.get(found.pattern, 0) + 1
            if len(items) < shown:
                items.append(f"{name}: {found.text}")
    return DegenerateTotal(
        generations=sum(scan.generations for _, scan in scans),
        found=sum(by_pattern.values()),
        by_pattern=by_pattern,
        items=items,
    )


# ------------------------------------------------------------------ the patterns


def tail_loop(units: Sequence[Hashable]) -> tuple[int, int] | None:
    """``(period, covered)`` of the tail loop covering the most units (ties: the shortest
    period), or None when no period repeats at the end even once."""
    n = len(units)
    best: tuple[int, int] | None = None
    for p in range(1, min(MAX_PERIOD, n // 2) + 1):
        k = 0
        while k < n - p and units[n - 1 - k] == units[n - 1 - k - p]:
            k += 1
        if k >= p and (best is None or k + p > best[1]):
            best = (p, k + p)
    return best


def stutter(units: Sequence[Hashable]) -> tuple[int, int]:
    """``(start, pairs)`` of the longest run of back-to-back duplicated pairs holding at
    least :data:`MIN_STUTTER_UNITS` distinct units (module docstring); ``(0, 0)`` when there
    is none."""
    best = (0, 0)
    for parity in (0, 1):
        i = parity
        while i < len(units) - 1:
            j = i
            while j < len(units) - 1 and units[j] == units[j + 1]:
                j += 2
            pairs = (j - i) // 2
            distinct = len(set(units[i:j]))
            if pairs > best[1] and distinct >= MIN_STUTTER_UNITS:
                best = (i, pairs)
            i = j + 2 if j > i else i + 2
    return best


def _quoted(text: str) -> str:
    """``text`` escaped for any report (``repr``: control characters as ``\\x08``), clipped."""
    shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
    return repr(shown)


def find_degenerate(
    units: Sequence[Hashable],
    finish_reason: str | None,
    *,
    where: str,
    unit: str = "token",
    texts: Sequence[str] | None = None,
) -> Degenerate | None:
    """The degenerate stretch of one generation's ``units`` (token ids, words or characters:
    the module docstring's rule), or None. ``texts[i]`` is unit ``i``'s text (a token's
    text; words and characters are their own), for the repeated text; without it the units
    are shown as they are (token ids)."""

    def shown(start: int, stop: int) -> str:
        if texts is not None and len(texts) >= stop:
            return "".join(texts[start:stop])
        return " ".join(str(u) for u in units[start:stop])

    n = len(units)
    plural = f"{unit}s"
    loop = tail_loop(units)
    if loop is not None and finish_reason != "stop":
        period, covered = loop
        if covered >= MIN_LOOP and covered >= MIN_REPEATS * period:
            start = n - covered
            repeated = shown(start, start + period)
            return Degenerate(
                LOOP,
                where,
                period,
                start,
                covered,
                n,
                unit,
                repeated,
                f"loop of period {period} ({_quoted(repeated)}) in {where}: {covered} of "
                f"{n} {plural} from {unit} {start} to the end",
            )
    start, pairs = stutter(units)
    if pairs >= MIN_STUTTER_PAIRS:
        repeated = shown(start, start + 4)
        return Degenerate(
            STUTTER,
            where,
            2,
            start,
            2 * pairs,
            n,
            unit,
            repeated,
            f"stutter (every other {unit} duplicated: {_quoted(repeated)}...) in {where}: "
            f"{2 * pairs} of {n} {plural} from {unit} {start}",
        )
    return None


def generation_degenerate(where: str, generation: Generation) -> Degenerate | None:
    """:func:`find_degenerate` of a generation: its token ids (the end-of-sequence token it
    stopped on left out; token texts shown where given), else its text as words, then as
    characters."""
    reason = generation.finish_reason
    ids = generation.token_ids
    if ids is not None:
        keep = len(ids) - (1 if reason == "stop" and ids else 0)
        texts = generation.token_texts
        return find_degenerate(
            ids[:keep],
            reason,
            where=where,
            texts=texts[:keep] if texts is not None and len(texts) == len(ids) else None,
        )
    words = _WORD.findall(generation.text)
    found = find_degenerate(words, reason, where=where, unit="word", texts=words)
    if found is None:
        chars = list(generation.text)
        found = find_degenerate(chars, reason, where=where, unit="character", texts=chars)
    return found
