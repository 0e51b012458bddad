"""Load metrics from request timestamps: concurrency actually achieved, latency, throughput.

A request is an interval ``(start, end)`` in seconds on one monotonic clock. For a set of
intervals, ``span = max(end) - min(start)`` (the wall time of the burst):

- time-weighted mean in flight ``= sum_i (end_i - start_i) / span``: the integral of the
  number of requests in flight over the span, divided by the span;
- max in flight: the largest number of intervals that overlap at one instant; intervals
  that only touch (one ends when the next starts) do not overlap;
- tokens per second ``= total generated tokens / span``.

Pure functions: stdlib only, no engine imports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Interval = tuple[float, float]


def span(intervals: Sequence[Interval]) -> float:
    """``max(end) - min(start)``; 0.0 for no intervals."""
    if not intervals:
        return 0.0
    return max(end for _, end in intervals) - min(start for start, _ in intervals)


def mean_in_flight(intervals: Sequence[Interval]) -> float:
    """Time-weighted mean number of requests in flight, ``sum(end - start) / span``; nan when
    the span is zero (no intervals, or only instantaneous ones)."""
    total = span(intervals)
    if total <= 0.0:
        return math.nan
    return math.fsum(end - start for start, end in intervals) / total


def max_in_flight(intervals: Sequence[Interval]) -> int:
    """Largest number of overlapping intervals (a sweep over start/end events; at equal
    timestamps ends come before starts, so touching intervals are not counted together)."""
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    current = peak = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def tokens_per_second(tokens: int, intervals: Sequence[Interval]) -> float:
    """``tokens / span``; nan when the span is zero."""
    total = span(intervals)
    return tokens / total if total > 0.0 else math.nan
