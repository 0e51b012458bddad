"""Pure helpers of the speed benchmark: run order, medians and ratios of alternating runs.

Every tool of a scenario is run once per *round*, the tools of a round one after the other;
the order rotates from round to round (:func:`alternating_order`), so no tool always runs
first (page cache warm-up, a neighbour's load burst). A ratio between two tools is the
median over rounds of that round's ratio (:func:`median_ratio`): both runs of a pair were
made minutes apart at most, so load that changes slowly cancels in each pair.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One run of one tool: wall clock from spawn to exit, user + system CPU time, and the
    peak resident set size of the process, in bytes."""

    wall_s: float
    cpu_s: float
    peak_rss: int


def alternating_order(tools: Sequence[str], rounds: int) -> list[list[str]]:
    """The tools of each round: round ``r`` is ``tools`` rotated left by ``r``.

    ``alternating_order(["a", "b", "c"], 4)`` is ``[[a, b, c], [b, c, a], [c, a, b],
    [a, b, c]]``: over ``len(tools)`` rounds each tool runs once in each position."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    n = len(tools)
    return [[tools[(r + i) % n] for i in range(n)] for r in range(rounds)]


def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count); raises on no values."""
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def median_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """``median(numerator[r] / denominator[r])`` over rounds ``r`` (paired runs).

    Not ``median(numerator) / median(denominator)``: pairing cancels load that changes
    between rounds. Raises on unequal lengths, no rounds or a zero denominator."""
    if len(numerator) != len(denominator):
        raise ValueError(f"{len(numerator)} runs against {len(denominator)}: not paired")
    if any(d == 0 for d in denominator):
        raise ValueError("a ratio to a run of zero seconds")
    return median([n / d for n, d in zip(numerator, denominator, strict=True)])


@dataclass(frozen=True)
class ToolSummary:
    """The median wall time, CPU time and peak RSS of a tool's runs, and every wall time."""

    tool: str
    wall_s: float
    cpu_s: float
    peak_rss: int
    walls: tuple[float, ...]


def summarize(tool: str, samples: Sequence[Sample]) -> ToolSummary:
    """Medians of ``samples`` (peak RSS: the largest, since memory is a limit, not a cost)."""
    return ToolSummary(
        tool=tool,
        wall_s=median([s.wall_s for s in samples]),
        cpu_s=median([s.cpu_s for s in samples]),
        peak_rss=max(s.peak_rss for s in samples),
        walls=tuple(s.wall_s for s in samples),
    )


def ratios_to(runs: Mapping[str, Sequence[Sample]], reference: str) -> dict[str, float]:
    """Each tool's :func:`median_ratio` of wall times to ``reference``'s (itself: 1.0)."""
    ref = [s.wall_s for s in runs[reference]]
    return {tool: median_ratio([s.wall_s for s in samples], ref) for tool, samples in runs.items()}
